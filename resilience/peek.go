package resilience

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/herdguard/herdguard/cache"
)

// Peek returns key's value if a cache holds it fresh: L1, then Redis (with
// Redis). It never calls a loader nor takes a lock, and does not put what
// it finds in L1. found is false on a miss or a stale entry; a stored
// not-found returns [ErrNotFound]. A Redis failure is returned with found
// false.
func (p *Pipeline[V]) Peek(ctx context.Context, key string) (v V, found bool, err error) {
	if err := p.checkWrite(ctx, key, "Peek"); err != nil {
		return v, false, err
	}
	if e, f := p.l1.Lookup(key); f == cache.Fresh {
		if e.NotFound {
			return v, false, ErrNotFound
		}
		return p.out(e.Value), true, nil
	}
	if p.l2 == nil {
		return v, false, nil
	}
	e, f, err := p.l2Get(ctx, key)
	switch {
	case err != nil || f != cache.Fresh:
		return v, false, err
	case e.NotFound:
		return v, false, ErrNotFound
	}
	return p.out(e.Value), true, nil
}

// Refresh loads key now, whatever the caches hold, stores the value as a
// load on a miss does, and returns it. It follows a miss's rules: the
// concurrent Refresh calls of key in this process share one load; with
// Lock, one process loads at a time, and a Refresh that finds another
// process's lock waits for that load's value (a value written after the
// Refresh began answers it). A failed
// load returns its error: there is no fallback, and the cached value is
// left as it was. The shared load runs detached from ctx, bounded by
// FlightTimeout; a caller whose ctx ends returns at once. A Get's load of
// key already in flight is not joined: Refresh loads anew.
func (p *Pipeline[V]) Refresh(ctx context.Context, key string, load LoadFunc[V]) (V, error) {
	var zero V
	if err := p.checkGet(ctx, key, load); err != nil {
		return zero, err
	}
	after := time.Now()
	run := func() (any, error) {
		// The shared load keeps the first caller's values (its span) but
		// not its cancellation.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.flightTimeout)
		defer cancel()
		o := &outcome[V]{refresh: true, after: after}
		return o, p.fetchInto(fctx, key, load, o)
	}
	type res struct {
		o   any
		err error
	}
	ch := make(chan res, 1) // buffered: a caller that left never blocks the load
	if !p.bg.add() {
		return zero, ErrClosed
	}
	go func() {
		defer p.bg.done()
		o, err, _ := p.writes.refreshes.Do(key, run)
		ch <- res{o, err}
	}()
	select {
	case <-ctx.Done():
		return zero, ctx.Err()
	case r := <-ch:
		if r.err != nil {
			return zero, r.err
		}
		return p.out(r.o.(*outcome[V]).res.Value), nil
	}
}

// out is what a caller gets of a value the cache holds: the value itself,
// or its copy with Clone.
func (p *Pipeline[V]) out(v V) V {
	if c := p.writes.clone; c != nil {
		return c(v)
	}
	return v
}

// cloned applies Clone to a result's value.
func (p *Pipeline[V]) cloned(r Result[V], err error) (Result[V], error) {
	if c := p.writes.clone; c != nil && err == nil {
		r.Value = c(r.Value)
	}
	return r, err
}

// Clone makes every value handed to a caller (by Get, GetResult, Peek,
// Refresh) a copy made by clone, and Set store a copy of its value, so
// that callers may change what they get. Without it, values are shared:
// every caller of a key gets the value the cache holds, and must not
// change a map, slice or pointer in it. clone runs on every call, L1 hits
// included; it must not panic.
// default: none (values are shared)
func (b *Builder[V]) Clone(clone func(V) V) *Builder[V] {
	if clone == nil {
		return b.fail("Clone", "must not be nil")
	}
	b.c.clone = clone
	return b
}

// MinLoaderTTL is the shortest TTL a loader can give its value with
// [SetTTL].
const MinLoaderTTL = time.Second

// loaderTTL carries a TTL from the loader to the pipeline.
type loaderTTL struct{ d atomic.Int64 }

type loaderTTLKey struct{}

// SetTTL, called by a [LoadFunc] with the context the pipeline gave it,
// sets the TTL of the value it is about to return: from a Cache-Control
// max-age, or a row's expiry. The TTL is clamped to [MinLoaderTTL, the
// Cache ttl]; jitter and the Stale grace apply to it as to the Cache ttl,
// and L1 keeps it no longer than L1TTL. It has no effect on a not-found,
// which keeps NegativeTTL. SetTTL reports false, doing nothing, when ctx
// does not come from a pipeline's load.
func SetTTL(ctx context.Context, d time.Duration) bool {
	if ctx == nil {
		return false
	}
	h, ok := ctx.Value(loaderTTLKey{}).(*loaderTTL)
	if !ok {
		return false
	}
	h.d.Store(int64(max(d, MinLoaderTTL)))
	return true
}

// withLoaderTTL gives the loader's context a place for SetTTL.
func withLoaderTTL(ctx context.Context) (context.Context, *loaderTTL) {
	h := new(loaderTTL)
	return context.WithValue(ctx, loaderTTLKey{}, h), h
}

// applyLoaderTTL re-times e with the TTL its loader set, if any.
func (p *Pipeline[V]) applyLoaderTTL(e *cache.Entry[V], h *loaderTTL) {
	d := time.Duration(h.d.Load())
	if d == 0 || e.NotFound {
		return
	}
	ttl := cache.Jitter(min(d, p.ttl), p.jitter)
	e.Expires = e.Written.Add(ttl)
	e.StaleUntil = e.Expires.Add(p.grace)
}
