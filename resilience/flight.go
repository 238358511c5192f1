package resilience

import (
	"context"
	"errors"
	"runtime/debug"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/fallback"
	"github.com/herdguard/herdguard/lock"
	"github.com/herdguard/herdguard/telemetry"
)

// outcome is what a shared load hands every caller that joined it.
type outcome[V any] struct {
	res      Result[V]
	stale    cache.Entry[V] // a stale copy found in L2, for the fallback chain
	hasStale bool
	leadSpan trace.SpanContext // the leader's single-flight span (parent of the shared load), for joiners' links
	// refresh is set for a background refresh: a fresh entry serves it
	// only if written after after, the write time of the entry that
	// triggered it (a refresh by another process, say).
	refresh bool
	after   time.Time
	// gen is the write generation when the load began: its L1 fill is
	// skipped if key was written or dropped since (see write.go).
	gen uint64
}

// accepts reports whether e, found with freshness f, answers the load o
// is for. A refresh takes only an entry written clearly after the one
// that called for it: L1 keeps write times on its monotonic clock and
// gives them back on the wall clock, a few microseconds off either way,
// so the same write read back from L2 must not pass for a newer one.
func (o *outcome[V]) accepts(e *cache.Entry[V], f cache.Freshness) bool {
	return f == cache.Fresh && (!o.refresh || e.Written.Sub(o.after) > writtenSlack)
}

// writtenSlack is how much later than a refresh's entry another entry must
// have been written to count as newer.
const writtenSlack = time.Millisecond

// failOpen marks the outcome as having gone on without Redis because of
// err.
func (o *outcome[V]) failOpen(err error) {
	o.res.FailedOpen = true
	if o.res.FailOpenCause == nil {
		o.res.FailOpenCause = err
	}
}

// miss handles a call the in-process cache could not answer: one shared
// load per key, then the fallback chain for whoever it failed. stale is
// what L1 held for key, if anything (hasStale).
func (p *Pipeline[V]) miss(ctx context.Context, key string, load LoadFunc[V], stale cache.Entry[V], hasStale bool) (Result[V], error) {
	if hasStale && p.swr {
		// Serve the stale copy now; one refresh runs in the background.
		p.refreshAsync(ctx, key, load, stale.Written)
		return Result[V]{Value: stale.Value, Source: SourceStale}, nil
	}
	hint := hasStale && p.l2Fresh(&stale)
	var o *outcome[V]
	var err error
	if p.group == nil {
		o = &outcome[V]{}
		err = p.fetchAlone(ctx, key, load, o, hint)
	} else {
		o, err = p.joinFlight(ctx, key, load, hint)
		if o == nil { // the caller left: its own context ended
			return Result[V]{}, err
		}
	}
	if err == nil || o.res.NotFound {
		return o.res, err
	}
	if ctx.Err() != nil {
		return Result[V]{FailedOpen: o.res.FailedOpen, FailOpenCause: o.res.FailOpenCause}, err
	}
	if !hasStale && o.hasStale {
		stale, hasStale = o.stale, true
	}
	if stale.NotFound {
		hasStale = false
	}
	r, err := p.fallBack(ctx, key, err, stale.Value, hasStale, o.res.FailedOpen)
	r.FailOpenCause = o.res.FailOpenCause
	return r, err
}

// l2Fresh reports whether e, an entry L1 holds past its L1 expiry, says
// that Redis still holds a fresh copy: L1 keeps an entry read from Redis
// no longer than L1TTL, but its stale-until is Redis's, so Redis's expiry
// is that less the grace. A plain read then answers; a key that may be
// cold goes straight to the look that also tries the lock.
func (p *Pipeline[V]) l2Fresh(e *cache.Entry[V]) bool {
	return !e.NotFound && e.StaleUntil.Add(-p.grace).After(time.Now())
}

// flightGroup runs one shared load per key in this process: the
// single-flight stage.
//
// It takes the place of golang.org/x/sync/singleflight, whose Do holds
// every joiner until the load ends, whatever its context says, and whose
// DoChan, which lets a joiner leave, runs each leader on a goroutine of
// its own: an L2 hit then paid a goroutine, a hand-off between
// goroutines and a context of its own. Here the leader runs on its
// caller's goroutine for as long as no load is needed (L1 again, the look
// at Redis), so a look that finds the value costs nothing more than the
// look. A load, or a wait for another process's, runs on a goroutine of
// its own, detached from the caller's context, under the flight's own
// deadline: any caller whose context ends, the leader too, returns at
// once, and the load goes on for the others.
type flightGroup[V any] struct {
	mu sync.Mutex // guards m and each flight's done
	m  map[string]*flight[V]
}

// flight is one shared load.
type flight[V any] struct {
	o    outcome[V] // the leader's outcome; val points at it
	val  any        // *outcome[V], set before done is closed
	err  error
	done chan struct{} // made by the first caller that waits; closed at the end
	// hooks hear the result of a flight that a batch joined (see lead).
	hooks []func(val any, err error)
}

// join returns key's flight under way, and true, or starts one, and false:
// the caller leads it and must end it.
func (g *flightGroup[V]) join(key string) (*flight[V], bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f, ok := g.m[key]; ok {
		if f.done == nil {
			f.done = make(chan struct{})
		}
		return f, true
	}
	if g.m == nil {
		g.m = make(map[string]*flight[V])
	}
	f := &flight[V]{}
	g.m[key] = f
	return f, false
}

// waitable returns f's done channel, making it if nobody has.
func (g *flightGroup[V]) waitable(f *flight[V]) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f.done == nil {
		f.done = make(chan struct{})
	}
	return f.done
}

// end records f's result and wakes whoever waits for it.
func (g *flightGroup[V]) end(key string, f *flight[V], val any, err error) {
	g.mu.Lock()
	f.val, f.err = val, err
	if g.m[key] == f {
		delete(g.m, key)
	}
	done, hooks := f.done, f.hooks
	f.hooks = nil
	g.mu.Unlock()
	if done != nil {
		close(done)
	}
	for _, h := range hooks {
		h(val, err)
	}
}

// lead makes the caller the leader of key's flight, which it ends with
// end, unless a flight of key is under way: then hook hears that flight's
// result when it ends, and lead returns false. A batch learns this way,
// without a goroutine per key, which keys it loads and which it joins.
// hook must not block.
func (g *flightGroup[V]) lead(key string, hook func(val any, err error)) (*flight[V], bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f, ok := g.m[key]; ok {
		f.hooks = append(f.hooks, hook)
		return f, false
	}
	if g.m == nil {
		g.m = make(map[string]*flight[V])
	}
	f := &flight[V]{}
	g.m[key] = f
	return f, true
}

// errFlightExited is the error of a shared load whose goroutine exited
// (runtime.Goexit) before it returned.
var errFlightExited = errors.New("resilience: shared load exited before it returned")

// Do runs fn as key's flight, or waits for the flight under way and
// returns its result, with shared set: singleflight's Do, for the
// background refresh, whose flight a caller may join and which may join
// a caller's.
func (g *flightGroup[V]) Do(key string, fn func() (any, error)) (v any, err error, shared bool) {
	f, joined := g.join(key)
	if joined {
		<-f.done
		return f.val, f.err, true
	}
	defer func() { g.end(key, f, v, err) }()
	v, err = fn()
	return v, err, false
}

// joinFlight runs the shared load of key, or joins the one running. A
// caller whose ctx ends returns at once, with a nil outcome; the shared
// load goes on for the others. hint says L2 likely holds a fresh copy.
func (p *Pipeline[V]) joinFlight(ctx context.Context, key string, load LoadFunc[V], hint bool) (*outcome[V], error) {
	// The span starts before the flight so that the leader's shared load
	// (L2, lock, loader) runs under it; joiners link to it instead.
	sctx := ctx
	var sp trace.Span
	if p.tel.Tracing() {
		sctx, sp = p.tel.Start(ctx, telemetry.SpanSingleFlight)
		defer sp.End()
	}
	f, joined := p.group.join(key)
	var done chan struct{}
	if joined {
		done = f.done
	} else {
		pd, finished, err := p.fetchLook(sctx, key, load, &f.o, hint)
		if !finished {
			done, finished, err = p.handOff(ctx, sctx, key, load, f, pd)
		}
		if finished {
			p.group.end(key, f, &f.o, err)
			if sp != nil {
				sp.SetAttributes(telemetry.Shared.Bool(false))
			}
			return &f.o, err
		}
	}
	select {
	case <-ctx.Done():
		if sp != nil {
			sp.AddEvent("caller left; the shared load goes on")
		}
		return nil, ctx.Err()
	case <-done:
	}
	o, _ := f.val.(*outcome[V]) // fetch's outcome, even after a panic
	if o == nil {
		o = &outcome[V]{}
	}
	if joined {
		c := *o // each joiner gets its own copy to relabel
		if c.res.Source == SourceLoader || c.res.Source == SourceWaited || c.res.Source == SourceL2 {
			c.res.Source = SourceCoalesced
		}
		o = &c
	}
	if sp != nil {
		sp.SetAttributes(telemetry.Shared.Bool(joined))
		if joined && o.leadSpan.IsValid() {
			sp.AddLink(trace.Link{SpanContext: o.leadSpan})
		}
	}
	return o, f.err
}

// handOff runs the rest of a leader's flight, the part that loads or
// waits, detached from the caller's context (it keeps the leader's values,
// its span, but not its cancellation) under a deadline of its own. A
// caller that cannot leave (a context that never ends) runs it itself;
// any other gets it run on a goroutine and waits on done. finished says
// the flight ended (with err) before that: the pipeline is closing.
func (p *Pipeline[V]) handOff(ctx, sctx context.Context, key string, load LoadFunc[V], f *flight[V], pd pending[V]) (done chan struct{}, finished bool, err error) {
	if !p.bg.add() { // closing: Close waits for loads, so none may start
		if pd.lk.lease != nil {
			p.release(sctx, key, pd.lk.lease)
		}
		return nil, true, ErrClosed
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(sctx), p.flightTimeout)
	if pd.lk.lease != nil {
		// The lease's watchdog starts now, not when the goroutine below
		// gets to run: a busy process must not look dead to the others.
		pd.g = hold(fctx, pd.lk.lease)
	}
	run := func() {
		defer p.bg.done()
		defer cancel()
		p.group.end(key, f, &f.o, p.fetchLoad(fctx, key, load, &f.o, &pd))
	}
	done = p.group.waitable(f)
	if ctx.Done() == nil {
		run()
		return done, false, nil
	}
	go run()
	return done, false, nil
}

// pending is what a look found that calls for a load, or a wait: the rest
// of a miss, which fetchLoad runs.
type pending[V any] struct {
	// relook: the caller's context ended during the look; the rest starts
	// with a look of its own.
	relook bool
	// mark is the notifier's, taken before the look: a subscription
	// after it misses no announcement since.
	mark uint64
	// locked: lk and err are a look through the Redis lock, which began
	// at start.
	locked bool
	start  time.Time
	lk     look[V]
	err    error
	// g is the grant of lk's lease once its watchdog beats.
	g *grant
}

// fetchAlone is a miss without the single-flight: the look, then the
// load, on the caller's goroutine and context.
func (p *Pipeline[V]) fetchAlone(ctx context.Context, key string, load LoadFunc[V], o *outcome[V], hint bool) error {
	pd, finished, err := p.fetchLook(ctx, key, load, o, hint)
	if finished {
		return err
	}
	if !p.bg.add() { // Close waits for loads
		if pd.lk.lease != nil {
			p.release(ctx, key, pd.lk.lease)
		}
		return ErrClosed
	}
	defer p.bg.done()
	return p.fetchLoad(ctx, key, load, o, &pd)
}

// fetchInto is the whole shared part of a miss, into o: L2, then the
// lock, then the loader (for a background refresh).
func (p *Pipeline[V]) fetchInto(ctx context.Context, key string, load LoadFunc[V], o *outcome[V]) error {
	pd, finished, err := p.fetchLook(ctx, key, load, o, false)
	if finished {
		return err
	}
	return p.fetchLoad(ctx, key, load, o, &pd)
}

// fetchLook is the part of a miss that may answer without a load: L1
// again, then one look at Redis. finished says it answered, into o, with
// err; otherwise pd holds what the rest of the miss needs. A panic of user
// code that escaped its own stage's recovery becomes a [*PanicError].
func (p *Pipeline[V]) fetchLook(ctx context.Context, key string, load LoadFunc[V], o *outcome[V], hint bool) (pd pending[V], finished bool, err error) {
	defer func() {
		if v := recover(); v != nil {
			pd, finished, err = pending[V]{}, true, &PanicError{Stage: "pipeline", Value: v, Stack: debug.Stack()}
		}
	}()
	// Writes (Set, Invalidate) from now on keep this load's value out of
	// L1.
	o.gen = p.writes.gens.stamp()
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		o.leadSpan = sc
	}
	if p.locker != nil {
		// Announcements delivered from now on reach the subscription that
		// a wait takes after the looks below, however late (see
		// subscribe): a look that finds the value needs none.
		if mn, ok := p.notifier.(lock.MarkNotifier); ok {
			pd.mark = mn.Mark()
		}
	}
	if p.l1 != nil && !o.refresh {
		// A caller that missed L1 just before the previous shared load
		// filled it may lead a new one after that one ended: look again.
		if e, f := p.l1.Lookup(key); f == cache.Fresh {
			o.res, err = fromEntry(e, SourceL1)
			return pd, true, err
		}
	}
	if p.rlock != nil && !p.swr && !o.refresh {
		if hint {
			// L1 says Redis has it fresh: a plain read, the cheapest
			// command, answers; if not, the look below also tries the
			// lock.
			e, f, err := p.l2Get(ctx, key)
			switch {
			case err != nil && ctx.Err() != nil:
				return pending[V]{relook: true}, false, nil
			case err != nil:
				o.failOpen(err)
				return pd, false, nil
			case f == cache.Fresh:
				p.fillL1(key, e, o)
				o.res, err = fromEntry(&e, SourceL2)
				return pd, true, err
			}
		}
		// One round trip reads the value and, if it is not fresh, tries
		// the lock.
		pd.locked, pd.start = true, time.Now()
		pd.lk, pd.err = p.lookRedis(ctx, key)
		switch {
		case pd.err == nil && pd.lk.lease == nil: // a fresh value: no lock needed
			p.fillL1(key, pd.lk.e, o)
			o.res, err = fromEntry(&pd.lk.e, SourceL2)
			return pd, true, err
		case pd.err != nil && !errors.Is(pd.err, lock.ErrNotAcquired) && ctx.Err() != nil:
			return pending[V]{relook: true}, false, nil
		}
		if pd.lk.f == cache.Stale {
			o.stale, o.hasStale = pd.lk.e, true
		}
		return pd, false, nil
	}
	if p.l2 != nil {
		e, f, err := p.l2Get(ctx, key)
		switch {
		case err != nil && ctx.Err() != nil:
			return pending[V]{relook: true}, false, nil
		case err != nil:
			o.failOpen(err)
		case o.accepts(&e, f):
			p.fillL1(key, e, o)
			o.res, err = fromEntry(&e, SourceL2)
			return pd, true, err
		case f == cache.Stale:
			o.stale, o.hasStale = e, true
			if p.swr && !e.NotFound && !o.refresh {
				p.fillL1(key, e, o)
				p.refreshAsync(ctx, key, load, e.Written)
				o.res = Result[V]{Value: e.Value, Source: SourceStale}
				return pd, true, nil
			}
		}
	}
	return pd, false, nil
}

// fetchLoad is the rest of a miss after fetchLook: the lock, then the
// loader, or the wait for another holder's value. A panic of user code
// that escaped its own stage's recovery becomes a [*PanicError].
func (p *Pipeline[V]) fetchLoad(ctx context.Context, key string, load LoadFunc[V], o *outcome[V], pd *pending[V]) (err error) {
	defer recoverPanic("pipeline", &err)
	if pd.relook {
		// The look was cut short by its caller's leaving: look again,
		// for those who stay.
		var finished bool
		*pd, finished, err = p.fetchLook(ctx, key, load, o, false)
		switch {
		case finished:
			return err
		case pd.relook:
			return ctx.Err()
		}
	}
	if pd.locked {
		return p.lockedRest(ctx, key, load, o, pd)
	}
	if p.locker != nil && !o.res.FailedOpen {
		return p.lockedLoad(ctx, key, load, o, pd.mark)
	}
	return p.loadAndStore(ctx, key, load, nil, o)
}

// fallBack runs the fallback chain for a call whose load failed with cause.
func (p *Pipeline[V]) fallBack(ctx context.Context, key string, cause error, stale V, hasStale, failedOpen bool) (Result[V], error) {
	var sp trace.Span
	if p.tel.Tracing() {
		ctx, sp = p.tel.Start(ctx, telemetry.SpanFallback, trace.WithAttributes(telemetry.FallbackReason.String(reason(cause))))
		defer sp.End()
	}
	v, src, err := p.fb.Resolve(ctx, key, cause, stale, hasStale)
	if sp != nil {
		sp.SetAttributes(telemetry.Source.String(src.String()))
	}
	switch src {
	case fallback.Stale:
		return Result[V]{Value: v, Source: SourceStale, FailedOpen: failedOpen, Cause: cause}, nil
	case fallback.Default:
		return Result[V]{Value: v, Source: SourceDefault, FailedOpen: failedOpen, Cause: cause}, nil
	}
	return Result[V]{FailedOpen: failedOpen}, err
}

// fallbackHandles says which errors the fallback chain answers: loader
// failures, not a caller's own cancellation nor a stored not-found.
func (p *Pipeline[V]) fallbackHandles(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, ErrNotFound) {
		return false
	}
	if p.isFailure != nil && !isBreakerRefusal(err) && !errors.Is(err, ErrTimeout) {
		var pe *PanicError
		if !errors.As(err, &pe) {
			return p.userIsFailure(err)
		}
	}
	return true
}

// reason names why a fallback answered, for spans and metrics.
func reason(err error) string {
	var pe *PanicError
	switch {
	case err == nil:
		return ""
	case isBreakerRefusal(err):
		return "breaker_open"
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.As(err, &pe):
		return "panic"
	}
	return "error"
}
