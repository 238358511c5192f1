package resilience

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/internal/bg"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/telemetry"
)

// refreshAsync reloads key in the background, at most once at a time per
// key, for stale-while-revalidate and early refresh. The goroutine is
// counted in p.bg, so Close waits for it; it ends when the load does, which
// FlightTimeout bounds.
//
// after is the write time of the entry that called for the refresh: a
// fresher entry found in L2 (another process refreshed it) ends the
// refresh without a load.
func (p *Pipeline[V]) refreshAsync(ctx context.Context, key string, load LoadFunc[V], after time.Time) {
	if p.closed.Load() {
		return
	}
	if _, busy := p.refreshing.LoadOrStore(key, struct{}{}); busy {
		return
	}
	// A refresh serves no caller: it keeps the caller's values (its span)
	// but not its cancellation.
	launched := p.bg.Launch(ctx, bg.How{Timeout: p.flightTimeout}, func(fctx context.Context) {
		defer p.refreshing.Delete(key)
		// The refresh's span is a child of the call that started it, in
		// the same trace; it may end after that call's span.
		var sp trace.Span
		fctx, sp = p.tel.Start(fctx, telemetry.SpanRefresh, trace.WithAttributes(p.tel.PipelineAttr))
		refresh := func() (any, error) { return p.reload(fctx, key, load, after) }
		_, err, _ := p.group.Do(key, refresh) // without the single-flight, refresh alone
		if sp != nil {
			if err != nil && !errors.Is(err, ErrNotFound) {
				sp.RecordError(err)
				sp.SetStatus(codes.Error, err.Error())
			}
			sp.End()
		}
	})
	if !launched {
		p.refreshing.Delete(key)
	}
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
	type res struct {
		o   any
		err error
	}
	ch := make(chan res, 1) // buffered: a caller that left never blocks the load
	// The shared load keeps the first caller's values (its span) but not
	// its cancellation.
	if !p.bg.Launch(ctx, bg.How{Timeout: p.flightTimeout}, func(fctx context.Context) {
		o, err, _ := p.writes.refreshes.Do(key, func() (any, error) { return p.reload(fctx, key, load, after) })
		ch <- res{o, err}
	}) {
		return zero, ErrClosed
	}
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

// reload is a refresh's load: the whole shared part of a miss (L2, then
// the lock, then the loader), answered only by an entry written after
// after. It returns its *outcome[V]. Its ctx is the refresh's own, which
// no caller cuts short: fetchLoad starts with the look.
func (p *Pipeline[V]) reload(ctx context.Context, key string, load LoadFunc[V], after time.Time) (any, error) {
	o := &outcome[V]{refresh: true, after: after}
	pd := pending[V]{relook: true}
	return o, p.fetchLoad(ctx, key, load, o, &pd)
}

// refreshEarly decides, XFetch style, whether a fresh entry should be
// reloaded now: with probability rising as expiry nears, and earlier for
// values that took long to load.
func (p *Pipeline[V]) refreshEarly(h rcache.Hit[V]) bool {
	took := h.LoadDuration()
	if took <= 0 {
		return false
	}
	gap := float64(took) * p.beta * -math.Log(1-rand.Float64())
	return gap > float64(h.FreshFor())
}
