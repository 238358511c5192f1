package resilience

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/fallback"
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
// is for.
func (o *outcome[V]) accepts(e *cache.Entry[V], f cache.Freshness) bool {
	return f == cache.Fresh && (!o.refresh || e.Written.After(o.after))
}

// failOpen marks the outcome as having gone on without Redis because of
// err.
func (o *outcome[V]) failOpen(err error) {
	o.res.FailedOpen = true
	if o.res.FailOpenCause == nil {
		o.res.FailOpenCause = err
	}
}

// miss handles a call the in-process cache could not answer: one shared
// load per key, then the fallback chain for whoever it failed.
func (p *Pipeline[V]) miss(ctx context.Context, key string, load LoadFunc[V], stale cache.Entry[V], hasStale bool) (Result[V], error) {
	// Close waits for calls that got this far.
	if !p.bg.add() {
		return Result[V]{}, ErrClosed
	}
	defer p.bg.done()
	if hasStale && p.swr {
		// Serve the stale copy now; one refresh runs in the background.
		p.refreshAsync(ctx, key, load, stale.Written)
		return Result[V]{Value: stale.Value, Source: SourceStale}, nil
	}
	var o *outcome[V]
	var err error
	if p.group == nil {
		o = &outcome[V]{}
		err = p.fetchInto(ctx, key, load, o)
	} else {
		o, err = p.joinFlight(ctx, key, load)
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

// joinFlight runs load under the key's single-flight, or joins the one
// running. A joiner whose ctx ends returns at once; the shared load goes on
// for the others.
func (p *Pipeline[V]) joinFlight(ctx context.Context, key string, load LoadFunc[V]) (*outcome[V], error) {
	// The span starts before DoChan so that the leader's shared load (L2,
	// lock, loader) runs under it; joiners link to it instead.
	sctx := ctx
	var sp trace.Span
	if p.tel.Tracing() {
		sctx, sp = p.tel.Start(ctx, telemetry.SpanSingleFlight)
		defer sp.End()
	}
	led := false
	ch := p.group.DoChan(key, func() (any, error) {
		led = true // read only after the result arrives on ch
		if p.bg.add() {
			defer p.bg.done()
		}
		// The shared load must outlive the caller that started it: other
		// callers wait for it. It keeps the leader's values (its span) but
		// not its cancellation, and gets a deadline of its own.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(sctx), p.flightTimeout)
		defer cancel()
		o := &outcome[V]{}
		return o, p.fetchInto(fctx, key, load, o)
	})
	select {
	case <-ctx.Done():
		// led may still be written by the load: do not read it here.
		if sp != nil {
			sp.AddEvent("caller left; the shared load goes on")
		}
		return nil, ctx.Err()
	case r := <-ch:
		o := r.Val.(*outcome[V]) // fetchInto's outcome, even after a panic
		if !led {
			c := *o // each joiner gets its own copy to relabel
			if c.res.Source == SourceLoader || c.res.Source == SourceWaited || c.res.Source == SourceL2 {
				c.res.Source = SourceCoalesced
			}
			o = &c
		}
		if sp != nil {
			sp.SetAttributes(telemetry.Shared.Bool(!led))
			if !led && o.leadSpan.IsValid() {
				sp.AddLink(trace.Link{SpanContext: o.leadSpan})
			}
		}
		return o, r.Err
	}
}

// fetchInto is the shared part of a miss, into o: L2, then the lock, then
// the loader. A panic of user code that escaped its own stage's recovery
// becomes a [*PanicError]: singleflight's DoChan would otherwise re-panic
// on a fresh goroutine and crash the process.
func (p *Pipeline[V]) fetchInto(ctx context.Context, key string, load LoadFunc[V], o *outcome[V]) (err error) {
	defer recoverPanic("pipeline", &err)
	_, err = p.fetch(ctx, key, load, o)
	return err
}

// fetch is fetchInto without the recovery.
func (p *Pipeline[V]) fetch(ctx context.Context, key string, load LoadFunc[V], o *outcome[V]) (*outcome[V], error) {
	o.gen = p.writes.gens.stamp()
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		o.leadSpan = sc
	}
	if p.l1 != nil && !o.refresh {
		// A caller that missed L1 just before the previous shared load
		// filled it may lead a new one after that one ended: look again.
		if e, f := p.l1.Lookup(key); f == cache.Fresh {
			var err error
			o.res, err = fromEntry(e, SourceL1)
			return o, err
		}
	}
	var woken <-chan struct{}
	if p.locker != nil {
		// Subscribe before the L2 read: a value that lands after a miss
		// there is announced to this subscription, so a waiter is never
		// left sleeping on an announcement it missed.
		ch, unsubscribe := p.notifier.Subscribe(key)
		defer unsubscribe()
		woken = ch
	}
	if p.rlock != nil && !p.swr && !o.refresh {
		// One round trip reads the value and, if it is not fresh, tries
		// the lock.
		return o, p.lockedFetch(ctx, key, load, o, woken)
	}
	if p.l2 != nil {
		e, f, err := p.l2Get(ctx, key)
		switch {
		case err != nil:
			o.failOpen(err)
		case o.accepts(&e, f):
			p.fillL1(key, e, o)
			o.res, err = fromEntry(&e, SourceL2)
			return o, err
		case f == cache.Stale:
			o.stale, o.hasStale = e, true
			if p.swr && !e.NotFound && !o.refresh {
				p.fillL1(key, e, o)
				p.refreshAsync(ctx, key, load, e.Written)
				o.res = Result[V]{Value: e.Value, Source: SourceStale}
				return o, nil
			}
		}
	}
	if p.locker != nil && !o.res.FailedOpen {
		return p.lockedLoad(ctx, key, load, o, woken)
	}
	return o, p.loadAndStore(ctx, key, load, nil, o)
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
