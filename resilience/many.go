package resilience

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/fallback"
	"github.com/herdguard/herdguard/lock"
	"github.com/herdguard/herdguard/telemetry"
)

// LoadManyFunc loads the values of keys in one call: one SQL query with
// WHERE id = ANY($1), one HTTP request for many ids. It should honour ctx.
//
// The returned map holds a value for each key that has one; a key left out
// has none, as a [LoadFunc] returning [ErrNotFound] says (and [ErrNotFound]
// as the error says it of every key). Any other error fails every key of
// the call: the loader's breaker counts it, Retry retries the whole call,
// and each key goes to the fallback chain. To fail some keys only, return
// [KeyErrors] for them (as the error, or wrapped in it) beside the values
// of the others: the call then counts as a success.
type LoadManyFunc[V any] func(ctx context.Context, keys []string) (map[string]V, error)

// spanGetMany is the span of one [Pipeline.GetMany] call. It has no child
// per key: the batch's Redis round trips, loader call and write-back each
// have one.
const spanGetMany = "resilience.get_many"

var (
	attrKeys       = attribute.Key("herdguard.keys")
	attrFailedKeys = attribute.Key("herdguard.keys.failed")
	attrOpenKeys   = attribute.Key("herdguard.keys.failed_open")
)

// GetMany returns the values of keys, as [Pipeline.GetResult] would for
// each, at the cost of one batch: the in-process cache first; then, for
// its misses, one Redis round trip that reads each key's value and, with
// Lock, tries its lock (one script per key, all pipelined); then ONE call
// of loadMany for every key this process won, or that Redis could not
// answer, written back in one round trip (write, release and announce per
// key). More than [GetManyChunk] misses go through these steps a chunk at
// a time, with a loader call per chunk. (A round trip carries at most 128
// commands: a chunk's look goes out as a few of them, side by side.) Keys another process holds are waited for together, woken by their
// announcements, with the waiters' rules of [Pipeline.Get] (a dead holder
// taken over, MaxWait, then a load without the lock). Keys another caller
// of this process is already loading, with Get or GetMany, are joined, not
// loaded again.
//
// The map holds one Result per distinct key (duplicates are answered
// once). A key with no value has NotFound set (cached for NegativeTTL) and
// is not an error. A key whose load failed gets the fallback chain (the
// stale copy, then the default) as Get does; the keys left failing are
// listed in the returned [KeyErrors], with a zero Result in the map. When
// Redis fails, every key is loaded by this process, in one loadMany call,
// and marked FailedOpen. When ctx ends first, the keys still unanswered
// are in KeyErrors with ctx's error; the shared load goes on for others.
//
// Other errors leave the map nil: [ErrNilContext], [ErrNilLoader],
// [ErrEmptyKey] for an empty key, [ErrClosed], [ErrWrongCall].
func (p *Pipeline[V]) GetMany(ctx context.Context, keys []string, loadMany LoadManyFunc[V]) (map[string]Result[V], error) {
	switch {
	case ctx == nil:
		return nil, ErrNilContext
	case loadMany == nil:
		return nil, ErrNilLoader
	case p.keyless:
		return nil, wrongCall(p.name, "is Keyless: use Do")
	case p.closed.Load():
		return nil, ErrClosed
	}
	uniq := make([]string, 0, len(keys))
	seen := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		if k == "" {
			return nil, ErrEmptyKey
		}
		if _, dup := seen[k]; !dup {
			seen[k] = struct{}{}
			uniq = append(uniq, k)
		}
	}
	var sp trace.Span
	if p.tel.Tracing() {
		ctx, sp = p.tel.Start(ctx, spanGetMany, trace.WithAttributes(p.tel.PipelineAttr, attrKeys.Int(len(uniq))))
	}
	b := &manyCall[V]{res: make(map[string]Result[V], len(uniq)), errs: KeyErrors{}}
	var misses []string
	stale := map[string]cache.Entry[V]{}
	for _, k := range uniq {
		var h cache.Hit[V]
		f := cache.Miss
		if p.l1 != nil {
			h, f = p.l1.Find(k)
		}
		switch f {
		case cache.Fresh:
			if p.beta > 0 && p.refreshEarly(h) {
				p.refreshAsync(ctx, k, oneOfMany(loadMany), h.Written())
			}
			if h.NotFound() {
				b.res[k] = Result[V]{Source: SourceL1, NotFound: true}
			} else {
				b.res[k] = Result[V]{Value: h.Value(), Source: SourceL1}
			}
			continue
		case cache.Stale:
			if p.swr && !h.NotFound() {
				p.refreshAsync(ctx, k, oneOfMany(loadMany), h.Written())
				b.res[k] = Result[V]{Value: h.Value(), Source: SourceStale}
				continue
			}
			stale[k] = h.Entry()
		}
		misses = append(misses, k)
	}
	if len(misses) > 0 {
		p.missMany(ctx, b, misses, stale, loadMany)
	}
	p.finishMany(ctx, sp, b)
	if p.writes.clone != nil {
		for k, r := range b.res {
			r.Value = p.out(r.Value)
			b.res[k] = r
		}
	}
	if len(b.errs) > 0 {
		return b.res, b.errs
	}
	return b.res, nil
}

// manyCall is what one GetMany call has gathered.
type manyCall[V any] struct {
	res  map[string]Result[V]
	errs KeyErrors
}

// keyOut is one key's outcome in a batch's shared load.
type keyOut[V any] struct {
	o   *outcome[V]
	err error
	set bool
}

// answer is one missed key's outcome, delivered to the GetMany call.
type answer[V any] struct {
	key    string
	o      *outcome[V]
	err    error
	joined bool // another caller's load
}

// missMany answers the keys L1 could not: it joins the loads under way in
// this process, and runs one shared batch load for the rest.
func (p *Pipeline[V]) missMany(ctx context.Context, b *manyCall[V], misses []string, stale map[string]cache.Entry[V], load LoadManyFunc[V]) {
	if !p.bg.add() {
		for _, k := range misses {
			b.res[k] = Result[V]{}
			b.errs[k] = ErrClosed
		}
		return
	}
	defer p.bg.done()
	// Buffered for every key: nobody ever blocks on it, even once this
	// call has left.
	answers := make(chan answer[V], len(misses))
	ours := misses
	var led map[string]*flight[V]
	if p.group != nil {
		ours = nil
		led = make(map[string]*flight[V])
		for _, k := range misses {
			f, mine := p.group.lead(k, func(val any, err error) {
				o, _ := val.(*outcome[V])
				answers <- answer[V]{key: k, o: o, err: err, joined: true}
			})
			if mine {
				ours = append(ours, k)
				led[k] = f
			}
		}
	}
	if len(ours) > 0 {
		deliver := func(outs map[string]*keyOut[V]) {
			for _, k := range ours {
				out := outs[k]
				if f := led[k]; f != nil {
					p.group.end(k, f, out.o, out.err)
				}
				answers <- answer[V]{key: k, o: out.o, err: out.err}
			}
		}
		switch {
		case p.group == nil:
			// Nobody else waits for these loads: they run on the caller's
			// context.
			deliver(p.fetchMany(ctx, ours, load))
		case ctx.Done() == nil:
			// A caller whose context cannot end never leaves early, so
			// the shared load runs on the caller's goroutine, under a
			// deadline of its own.
			fctx, cancel := context.WithTimeout(ctx, p.flightTimeout)
			deliver(p.fetchMany(fctx, ours, load))
			cancel()
		case !p.bg.add():
			outs := make(map[string]*keyOut[V], len(ours))
			for _, k := range ours {
				outs[k] = &keyOut[V]{o: &outcome[V]{}, err: ErrClosed}
			}
			deliver(outs)
		default:
			// The shared load outlives the caller, who may leave: others
			// may have joined it. It keeps the caller's values (its span)
			// but not its cancellation, and gets a deadline of its own.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.flightTimeout)
			go func() {
				defer p.bg.done()
				defer cancel()
				deliver(p.fetchMany(fctx, ours, load))
			}()
		}
	}
	pending := make(map[string]struct{}, len(misses))
	for _, k := range misses {
		pending[k] = struct{}{}
	}
	for len(pending) > 0 {
		select {
		case a := <-answers:
			delete(pending, a.key)
			st, hasStale := stale[a.key]
			p.settle(ctx, b, a, st, hasStale)
		case <-ctx.Done():
			for k := range pending {
				b.res[k] = Result[V]{}
				b.errs[k] = ctx.Err()
			}
			return
		}
	}
}

// settle turns one key's outcome into its Result, with the fallback chain
// for a failed load, as miss does for Get.
func (p *Pipeline[V]) settle(ctx context.Context, b *manyCall[V], a answer[V], stale cache.Entry[V], hasStale bool) {
	o, err := a.o, a.err
	if o == nil {
		o = &outcome[V]{}
		if err == nil {
			err = errFlightExited
		}
	}
	r := o.res // a copy: a joined outcome is shared
	if a.joined && (r.Source == SourceLoader || r.Source == SourceWaited || r.Source == SourceL2) {
		r.Source = SourceCoalesced
	}
	if err == nil || r.NotFound {
		b.res[a.key] = r
		return
	}
	if ctx.Err() != nil {
		b.res[a.key] = Result[V]{FailedOpen: r.FailedOpen, FailOpenCause: r.FailOpenCause}
		b.errs[a.key] = err
		return
	}
	if !hasStale && o.hasStale {
		stale, hasStale = o.stale, true
	}
	if stale.NotFound {
		hasStale = false
	}
	fr, ferr := p.resolve(ctx, a.key, err, stale.Value, hasStale, r.FailedOpen)
	fr.FailOpenCause = r.FailOpenCause
	b.res[a.key] = fr
	if ferr != nil {
		b.errs[a.key] = ferr
	}
}

// resolve is fallBack without a span of its own: a batch has no span per
// key.
func (p *Pipeline[V]) resolve(ctx context.Context, key string, cause error, stale V, hasStale, failedOpen bool) (Result[V], error) {
	v, src, err := p.fb.Resolve(ctx, key, cause, stale, hasStale)
	switch src {
	case fallback.Stale:
		return Result[V]{Value: v, Source: SourceStale, FailedOpen: failedOpen, Cause: cause}, nil
	case fallback.Default:
		return Result[V]{Value: v, Source: SourceDefault, FailedOpen: failedOpen, Cause: cause}, nil
	}
	return Result[V]{FailedOpen: failedOpen}, err
}

// finishMany records the batch's outcome: metrics per key, as Get's, and
// on the batch's span the count of keys per source.
func (p *Pipeline[V]) finishMany(ctx context.Context, sp trace.Span, b *manyCall[V]) {
	var counts [len(sourceNames)]int
	open := 0
	for k, r := range b.res {
		countCall(&p.stats, &r, b.errs[k])
		if int(r.Source) < len(counts) {
			counts[r.Source]++
		}
		if r.FailedOpen {
			open++
		}
		if p.tel.Metering() {
			if r.Cause != nil {
				p.tel.Fallback(ctx, r.Source.String(), reason(r.Cause))
			}
		}
	}
	if sp == nil {
		return
	}
	for i, n := range counts {
		if n > 0 {
			sp.SetAttributes(attribute.Int("herdguard.keys."+sourceNames[i], n))
		}
	}
	sp.SetAttributes(attrOpenKeys.Int(open), attrFailedKeys.Int(len(b.errs)))
	if open > 0 {
		sp.SetAttributes(telemetry.FailedOpen.Bool(true))
	}
	if len(b.errs) > 0 {
		sp.SetStatus(codes.Error, b.errs.Error())
	}
	sp.End()
}

// oneOfMany turns a batch loader into a loader of one key, for refreshes.
func oneOfMany[V any](load LoadManyFunc[V]) LoadFunc[V] {
	return func(ctx context.Context, key string) (V, error) {
		var zero V
		m, err := load(ctx, []string{key})
		var ke KeyErrors
		if errors.As(err, &ke) {
			if kerr := ke[key]; kerr != nil {
				return zero, kerr
			}
			err = nil
		}
		if err != nil {
			return zero, err
		}
		v, ok := m[key]
		if !ok {
			return zero, ErrNotFound
		}
		return v, nil
	}
}

// fetchMany is the shared part of a batch's misses: L1 again, then Redis
// (the value, else the lock), then one loader call. Each key gets its
// outcome; a panic of the pipeline's own reaches every key as a
// [*PanicError].
func (p *Pipeline[V]) fetchMany(ctx context.Context, keys []string, load LoadManyFunc[V]) (outs map[string]*keyOut[V]) {
	outs = make(map[string]*keyOut[V], len(keys))
	for _, k := range keys {
		// Writes (Set, Invalidate) from now on keep this load's value
		// out of L1.
		outs[k] = &keyOut[V]{o: &outcome[V]{gen: p.writes.gens.stamp()}}
	}
	// Not recoverPanic: the panic is the error of every key not yet
	// answered, not one return value.
	defer func() {
		if v := recover(); v != nil {
			pe := panicked("pipeline", v)
			for _, out := range outs {
				if !out.set {
					out.err, out.set = pe, true
				}
			}
		}
	}()
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		for _, out := range outs {
			out.o.leadSpan = sc
		}
	}
	todo := make([]string, 0, len(keys))
	for _, k := range keys {
		if p.l1 != nil {
			// A load that ended just before this batch led may have
			// filled L1.
			if e, f := p.l1.Lookup(k); f == cache.Fresh {
				out := outs[k]
				out.o.res, out.err = fromEntry(e, SourceL1)
				out.set = true
				continue
			}
		}
		todo = append(todo, k)
	}
	if len(todo) == 0 {
		return outs
	}
	// Chunk by chunk: a chunk's leases are held from its look to its
	// write-back only, which a watchdog's beat covers however many keys
	// the call has (100,000 keys in one look outlasted the beat of the
	// first leases it took, and other processes took them over).
	for chunk := range slices.Chunk(todo, GetManyChunk) {
		switch {
		case p.l2 != nil && p.locker != nil:
			p.lockedMany(ctx, chunk, load, outs)
		case p.l2 != nil:
			p.l2Many(ctx, chunk, load, outs)
		default:
			items := make([]*loadItem, len(chunk))
			for i, k := range chunk {
				items[i] = &loadItem{key: k}
			}
			p.loadBatch(ctx, items, load, outs)
		}
		if err := ctx.Err(); err != nil {
			// The chunks not reached fail with the caller's end.
			for _, out := range outs {
				if !out.set {
					out.err, out.set = err, true
				}
			}
			break
		}
	}
	return outs
}

// GetManyChunk is how many missed keys [Pipeline.GetMany] takes through
// Redis (or a backend) and its loader at a time: a call of more keys runs
// chunk after chunk, with one loader call each.
const GetManyChunk = 4096

// loadItem is one key of a loader call, with the lease it holds (nil:
// unlocked) and the Redis failure it goes on without (nil: none).
type loadItem struct {
	key      string
	lease    *lock.Lease
	failOpen error
	// lost is set when the lease was found lost by a watchdog (nil
	// without a lease); beating says the lease's own watchdog beats, so
	// the batch's need not.
	lost    *atomic.Bool
	beating bool
}

// heldItem is the load of k under the lease lk won.
func heldItem[V any](k string, lk *look[V]) *loadItem {
	it := &loadItem{key: k, lease: lk.lease, failOpen: lk.readFailed}
	if lk.g != nil {
		it.lost, it.beating = &lk.g.lost, true
	} else {
		it.lost = new(atomic.Bool)
	}
	return it
}

// l2Many is the batch's Redis read without Lock: one round trip, then one
// loader call for the misses.
func (p *Pipeline[V]) l2Many(ctx context.Context, keys []string, load LoadManyFunc[V], outs map[string]*keyOut[V]) {
	var sp trace.Span
	lctx := ctx
	if p.tel.Tracing() {
		lctx, sp = p.tel.Start(ctx, telemetry.SpanL2, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(p.l2Attrs("HGET", "Load", attrKeys.Int(len(keys)))...))
	}
	gots, err := guard(lctx, p.redisGuard, func(ctx context.Context) ([]cache.Got[V], error) {
		gs, err := p.l2.GetMany(ctx, keys)
		if err != nil {
			return nil, err
		}
		for _, g := range gs {
			if g.Err != nil && classify(ctx, g.Err) != errData {
				return gs, g.Err
			}
		}
		return gs, nil
	})
	if err != nil {
		p.failOpen(lctx, sp, "l2_get", err)
	}
	if sp != nil {
		sp.End()
	}
	if err != nil {
		p.loadBatch(ctx, readFailed(ctx, keys, err, outs), load, outs)
		return
	}
	var items []*loadItem
	for i, k := range keys {
		out := outs[k]
		g := gots[i]
		switch {
		case g.Err != nil:
			p.corrupt(ctx, nil, g.Err)
		case g.Freshness == cache.Fresh:
			p.fillL1(k, g.Entry, out.o)
			out.o.res, out.err = fromEntry(&g.Entry, SourceL2)
			out.set = true
			continue
		case g.Freshness == cache.Stale:
			out.o.stale, out.o.hasStale = g.Entry, true
		}
		items = append(items, &loadItem{key: k})
	}
	p.loadBatch(ctx, items, load, outs)
}

// readFailed settles the keys of a batch whose Redis read failed as a
// whole with err, and returns those to load: none when the caller's own
// context ended (each key fails with it), else every key, failing open.
func readFailed[V any](ctx context.Context, keys []string, err error, outs map[string]*keyOut[V]) []*loadItem {
	if classify(ctx, err) == errCanceled {
		for _, k := range keys {
			outs[k].err, outs[k].set = err, true
		}
		return nil
	}
	items := make([]*loadItem, len(keys))
	for i, k := range keys {
		items[i] = &loadItem{key: k, failOpen: err}
	}
	return items
}

// lockedMany is the batch's part with the lock: one look for every key
// (the value, else the lock), then this process's loads and its wait for
// the keys other processes hold, side by side.
func (p *Pipeline[V]) lockedMany(ctx context.Context, keys []string, load LoadManyFunc[V], outs map[string]*keyOut[V]) {
	// Subscribe before the look: a value that lands after it is
	// announced to these subscriptions.
	subs := make(map[string]<-chan struct{}, len(keys))
	for _, k := range keys {
		ch, unsubscribe := p.notifier.Subscribe(k)
		defer unsubscribe()
		subs[k] = ch
	}
	start := time.Now()
	looks, err := p.co.lookOrLockMany(ctx, keys)
	if err != nil {
		p.loadBatch(ctx, readFailed(ctx, keys, err, outs), load, outs)
		return
	}
	var items []*loadItem
	var waits []string
	for i, k := range keys {
		out := outs[k]
		lk := &looks[i]
		e, f := lk.e, lk.f
		if f == cache.Stale {
			out.o.stale, out.o.hasStale = e, true
		}
		switch {
		case lk.err == nil && lk.lease == nil && f == cache.Fresh:
			p.fillL1(k, e, out.o)
			out.o.res, out.err = fromEntry(&e, SourceL2)
			out.set = true
		case lk.err == nil && lk.lease == nil:
			// Fresh by its expiry field, yet unusable: a miss, loaded
			// without the lock (counted by Decode).
			items = append(items, &loadItem{key: k})
		case lk.err == nil:
			p.lockOutcome(ctx, nil, "acquired", start, lk.lease)
			items = append(items, heldItem(k, lk))
		case errors.Is(lk.err, lock.ErrNotAcquired):
			if p.swr && f == cache.Stale && !e.NotFound {
				// Another process refreshes it: serve the stale copy now.
				out.o.res = Result[V]{Value: e.Value, Source: SourceStale}
				out.set = true
				continue
			}
			waits = append(waits, k)
		default:
			if it := p.lookFailed(ctx, k, lk.err, out, start); it != nil {
				items = append(items, it)
			}
		}
	}
	var wg sync.WaitGroup
	if len(waits) > 0 {
		// One goroutine waits for every key that others hold while this
		// one loads its own. Each writes only its keys' outcomes.
		wg.Go(func() { p.awaitMany(ctx, waits, subs, load, outs, start) })
	}
	p.loadBatch(ctx, items, load, outs)
	wg.Wait()
}

// lookFailed settles key k, whose look in a batch failed with err (the
// failure recorded by the look), or returns its load: a per-key data
// problem is a miss, loaded without the lock; the service failing for this
// key alone, a load without it, failing open; the caller's end, an error.
func (p *Pipeline[V]) lookFailed(ctx context.Context, k string, err error, out *keyOut[V], start time.Time) *loadItem {
	switch classify(ctx, err) {
	case errData:
		p.corrupt(ctx, nil, err)
		return &loadItem{key: k}
	case errInfra, errRefused:
		p.lockOutcome(ctx, nil, "failed_open", start, nil)
		return &loadItem{key: k, failOpen: err}
	}
	out.err, out.set = err, true
	return nil
}

// awaitMany is the waiters' part for many keys at once, in one wait: each
// key's announcement wakes a look at the keys announced (one round trip
// for them all), with a jittered backoff poll of every key still waited
// for as the safety net. A look that takes the lock (its holder died or
// gave up) loads that key; a live holder is waited for up to MaxWait, then
// the keys still waited for are loaded without the lock. Keys that come
// due together are loaded in one loader call. A key whose announcement
// the look found false (still held, no value) is not woken by its
// announcements again before the next poll, as in await.
func (p *Pipeline[V]) awaitMany(ctx context.Context, keys []string, subs map[string]<-chan struct{}, load LoadManyFunc[V], outs map[string]*keyOut[V], start time.Time) {
	bo := p.pollBackOff()
	heard, stop := fanIn(keys, subs)
	defer stop()
	pending := slices.Clone(keys)
	waiting := make(map[string]bool, len(keys)) // the keys of pending
	for _, k := range keys {
		waiting[k] = true
	}
	quiet := map[string]bool{} // keys heard again only after the next poll
	listened := func(k string) bool { return waiting[k] && !quiet[k] }
	// Announced since the look: look again at once.
	woken := drainHeard(heard, "", listened)
	polled := false
	for len(pending) > 0 {
		if len(woken) > 0 {
			pending = p.lookAgain(ctx, woken, pending, load, outs, start)
			if ctx.Err() != nil {
				break
			}
			clear(waiting)
			for _, k := range pending {
				waiting[k] = true
			}
			if !polled {
				for _, k := range woken {
					quiet[k] = waiting[k]
				}
			}
		}
		if len(pending) == 0 {
			return
		}
		left := p.lockCfg.MaxWait - time.Since(start)
		if left <= 0 {
			items := make([]*loadItem, len(pending))
			for i, k := range pending {
				p.lockOutcome(ctx, nil, "timeout", start, nil)
				items[i] = &loadItem{key: k}
			}
			p.loadBatch(ctx, items, load, outs)
			return
		}
		t := time.NewTimer(min(bo.NextBackOff(), left))
		woken, polled = nil, false
		select {
		case <-t.C: // the poll: look at every key; it covers what was announced
			drainHeard(heard, "", func(string) bool { return false })
			clear(quiet)
			woken, polled = slices.Clone(pending), true
		case <-ctx.Done():
		case k := <-heard:
			woken = drainHeard(heard, k, listened)
		}
		t.Stop()
	}
	if err := ctx.Err(); err != nil {
		for _, k := range pending {
			out := outs[k]
			out.err, out.set = err, true
		}
	}
}

// fanIn passes the announcements of keys, heard on their subscriptions,
// on one channel: a goroutine per fanInKeys keys selects over theirs.
// One select over every key would cost each wake-up the whole set, and
// reflect.Select refuses more than 65,536 cases. stop ends the goroutines.
func fanIn(keys []string, subs map[string]<-chan struct{}) (heard <-chan string, stop func()) {
	ch := make(chan string, min(len(keys), fanInKeys))
	done := make(chan struct{})
	var wg sync.WaitGroup
	for chunk := range slices.Chunk(keys, fanInKeys) {
		cases := make([]reflect.SelectCase, 0, 1+len(chunk))
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(done)})
		for _, k := range chunk {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(subs[k])})
		}
		wg.Go(func() {
			for {
				i, _, _ := reflect.Select(cases)
				if i == 0 {
					return
				}
				select {
				case ch <- chunk[i-1]:
				case <-done:
					return
				}
			}
		})
	}
	return ch, func() { close(done); wg.Wait() }
}

// fanInKeys is how many keys' subscriptions one goroutine of fanIn
// selects over.
const fanInKeys = 64

// drainHeard returns first (unless empty) and the keys heard now, once
// each, that keep accepts.
func drainHeard(heard <-chan string, first string, keep func(string) bool) []string {
	var woken []string
	seen := map[string]bool{}
	add := func(k string) {
		if !seen[k] && keep(k) {
			seen[k] = true
			woken = append(woken, k)
		}
	}
	if first != "" {
		add(first)
	}
	for {
		select {
		case k := <-heard:
			add(k)
		default:
			return woken
		}
	}
}

// lookAgain looks at the woken keys in one round trip, settles those it
// can, loads those it must, and returns the keys still waited for.
func (p *Pipeline[V]) lookAgain(ctx context.Context, woken, pending []string, load LoadManyFunc[V], outs map[string]*keyOut[V], start time.Time) []string {
	looks, err := p.co.lookOrLockMany(ctx, woken)
	done := make(map[string]bool, len(woken))
	var items []*loadItem
	for i, k := range woken {
		out := outs[k]
		if err != nil {
			if classify(ctx, err) == errCanceled {
				out.err, out.set = err, true
			} else {
				p.lockOutcome(ctx, nil, "failed_open", start, nil)
				items = append(items, &loadItem{key: k, failOpen: err})
			}
			done[k] = true
			continue
		}
		lk := &looks[i]
		e, f := lk.e, lk.f
		switch {
		case lk.err == nil && lk.lease == nil && f == cache.Fresh:
			p.fillL1(k, e, out.o)
			p.lockOutcome(ctx, nil, "waited", start, nil)
			out.o.res, out.err = fromEntry(&e, SourceWaited)
			out.set = true
		case lk.err == nil && lk.lease == nil:
			items = append(items, &loadItem{key: k})
		case lk.err == nil:
			p.lockOutcome(ctx, nil, "acquired", start, lk.lease)
			items = append(items, heldItem(k, lk))
		case errors.Is(lk.err, lock.ErrNotAcquired):
			continue
		default:
			if it := p.lookFailed(ctx, k, lk.err, out, start); it != nil {
				items = append(items, it)
			}
		}
		done[k] = true
	}
	p.loadBatch(ctx, items, load, outs)
	return slices.DeleteFunc(pending, func(k string) bool { return done[k] })
}

// loadBatch calls the loader once for items and stores what it returns:
// under a lease, with one fenced commit per key (write while the lease
// holds, release, announce), all in one round trip; without one, a plain
// write; failed open, in L1 only.
func (p *Pipeline[V]) loadBatch(ctx context.Context, items []*loadItem, load LoadManyFunc[V], outs map[string]*keyOut[V]) {
	if len(items) == 0 {
		return
	}
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = it.key
	}
	stop := p.keepAliveMany(ctx, items)
	vals, keyErrs, took, err := p.callLoadMany(withFences(ctx, items), keys, load)
	stop()
	allNotFound := errors.Is(err, ErrNotFound)
	if allNotFound {
		err = nil
	}
	var release []*lock.Lease
	var writes []cache.Write[V]
	var written []*loadItem
	entries := make(map[string]cache.Entry[V], len(items))
	for _, it := range items {
		out := outs[it.key]
		out.set = true
		if it.failOpen != nil {
			out.o.failOpen(it.failOpen)
		}
		kerr := keyErrs[it.key]
		if err != nil || kerr != nil {
			out.err = err
			if err == nil {
				out.err = kerr
			}
			if it.lease != nil {
				release = append(release, it.lease)
			}
			continue
		}
		v, ok := vals[it.key]
		notFound := !ok || allNotFound
		if notFound && p.negTTL <= 0 {
			out.o.res = Result[V]{Source: SourceLoader, NotFound: true, FailedOpen: out.o.res.FailedOpen, FailOpenCause: out.o.res.FailOpenCause}
			out.err = ErrNotFound
			if it.lease != nil {
				release = append(release, it.lease)
			}
			continue
		}
		var fence int64
		if it.lease != nil {
			fence = it.lease.Fence()
		}
		e := p.newEntry(v, notFound, took, fence)
		out.o.res.Source = SourceLoader
		if notFound {
			out.o.res.NotFound = true
			out.err = ErrNotFound
		} else {
			out.o.res.Value = v
		}
		switch {
		case it.lease != nil && it.lost.Load():
			p.leaseLost(ctx, nil)
			release = append(release, it.lease)
		case p.l2 != nil && !out.o.res.FailedOpen:
			w := cache.Write[V]{Key: it.key, Entry: e}
			if it.lease != nil {
				w.Token, w.Release = it.lease.Token(), true
			}
			writes = append(writes, w)
			written = append(written, it)
			entries[it.key] = e
		default:
			p.fillL1(it.key, e, out.o)
			if it.lease != nil {
				release = append(release, it.lease)
			}
		}
	}
	release = append(release, p.storeMany(ctx, writes, written, outs)...)
	p.releaseMany(ctx, release)
}

// storeMany writes a batch's entries to L2 in one round trip, and to L1
// those that L2 did not refuse; it returns the leases still to release.
func (p *Pipeline[V]) storeMany(ctx context.Context, writes []cache.Write[V], items []*loadItem, outs map[string]*keyOut[V]) (release []*lock.Lease) {
	if len(writes) == 0 {
		return nil
	}
	var sp trace.Span
	if p.tel.Tracing() {
		ctx, sp = p.tel.Start(ctx, telemetry.SpanWriteBack, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(p.l2Attrs("EVALSHA", "Save", attrKeys.Int(len(writes)))...))
		defer sp.End()
	}
	ws, err := guard(ctx, p.redisGuard, func(ctx context.Context) ([]cache.Written, error) {
		ws, err := p.co.commitMany(ctx, writes)
		if err != nil {
			return nil, err
		}
		for _, w := range ws {
			if w.Err != nil && classify(ctx, w.Err) == errInfra {
				return ws, w.Err
			}
		}
		return ws, nil
	})
	if err != nil {
		p.failOpen(ctx, sp, "l2_set", err)
	}
	lost, refused := 0, 0
	for i, w := range writes {
		it := items[i]
		out := outs[it.key]
		var werr error
		stored := false
		if err != nil {
			werr = err
		} else {
			werr, stored = ws[i].Err, ws[i].Stored
		}
		switch {
		case errors.Is(werr, cache.ErrLockLost):
			it.lease.Forget()
			lost++
			continue
		case werr == nil && !stored:
			// A newer fence wrote the key; the commit released the lock.
			if it.lease != nil {
				it.lease.Forget()
			}
			refused++
			continue
		case werr == nil:
			if it.lease != nil {
				it.lease.Forget() // released by the commit
			}
		case errors.Is(werr, cache.ErrExpiredEntry):
			release = appendLease(release, it.lease)
		case classify(ctx, werr) == errData:
			p.corrupt(ctx, sp, werr) // L1 needs no encoding: keep it there
			release = appendLease(release, it.lease)
		default:
			if err == nil {
				p.failOpen(ctx, sp, "l2_set", werr)
			}
			out.o.failOpen(werr)
			release = appendLease(release, it.lease)
		}
		p.fillL1(it.key, w.Entry, out.o)
	}
	for range lost {
		p.leaseLost(ctx, sp)
	}
	if sp != nil && refused > 0 {
		sp.AddEvent("writes refused: a newer fence wrote the key", trace.WithAttributes(attrKeys.Int(refused)))
	}
	return release
}

func appendLease(ls []*lock.Lease, l *lock.Lease) []*lock.Lease {
	if l == nil {
		return ls
	}
	return append(ls, l)
}

// keepAliveMany beats for the items' leases while their loader call runs:
// one watchdog for the batch, extending every lease in one round trip per
// beat. It marks an item whose lease was found lost. The returned stop
// ends it and waits for it.
func (p *Pipeline[V]) keepAliveMany(ctx context.Context, items []*loadItem) (stop func()) {
	var held []*loadItem
	var leases []*lock.Lease
	every := time.Duration(0)
	for _, it := range items {
		// A lease that beats on its own (from its grant, see
		// lookThenLockMany) beats until released or forgotten.
		if it.lease != nil && !it.beating {
			held = append(held, it)
			leases = append(leases, it.lease)
			if every == 0 || it.lease.Every() < every {
				every = it.lease.Every()
			}
		}
	}
	if len(held) == 0 {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			ectx, cancel := context.WithTimeout(ctx, every)
			lost, _ := p.co.extendMany(ectx, leases)
			cancel()
			for i, l := range lost {
				if l {
					held[i].lost.Store(true)
				}
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// callLoadMany calls load once for keys, through the loader's breaker,
// retry and timeout as one call. A [KeyErrors] the loader returns fails
// those keys only and counts as a success.
func (p *Pipeline[V]) callLoadMany(ctx context.Context, keys []string, load LoadManyFunc[V]) (map[string]V, KeyErrors, time.Duration, error) {
	type got struct {
		vals map[string]V
		errs KeyErrors
	}
	// An attempt abandoned at its timeout may still finish: each attempt
	// stores what it got, and the one that succeeded is read after.
	var last atomic.Pointer[got]
	_, took, err := p.callLoader(ctx, keys[0], func(ctx context.Context, _ string) (V, error) {
		var zero V
		vals, err := load(ctx, slices.Clone(keys))
		var ke KeyErrors
		if errors.As(err, &ke) {
			last.Store(&got{vals, ke})
			return zero, nil
		}
		if err == nil {
			last.Store(&got{vals: vals})
		}
		return zero, err
	})
	if err != nil {
		return nil, nil, took, err
	}
	g := last.Load()
	if g == nil {
		return nil, nil, took, errFlightExited
	}
	return g.vals, g.errs, took, nil
}
