package resilience

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/cache"
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
			f, mine := p.group.Lead(k, func(val any, err error) {
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
					p.group.End(k, f, out.o, out.err)
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
	if a.joined {
		o = asJoiner(o) // a copy: a joined outcome is shared
	}
	// A batch has no span per key: its fallbacks have none either.
	r, err := p.settleMiss(ctx, a.key, o, err, stale, hasStale, false)
	b.res[a.key] = r
	if err != nil && !r.NotFound {
		b.errs[a.key] = err
	}
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
