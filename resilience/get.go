// A call, file by file, in the order it meets them:
//
//	get.go       Get, GetResult: the checks, the L1 lookup, the call and its
//	             end (a batch's too), a miss
//	refresh.go   early and background refresh, Refresh
//	flight.go    the local single-flight: join a key's load, or lead it,
//	             handing the load to background work
//	fetch.go     the leader's look (L1 again, then L2 through the seam),
//	             then the rest; the L1 fill; the one recoverer
//	l2.go        the write-back (the commit under a grant), a key's and a
//	             batch's; failing open
//	lock.go      the lock stage: what a look found, a key's or a batch's
//	             (kindOf); a batch's first look, with Lock or a plain read;
//	             hold and load; the releases
//	wait.go      the wait for the values others hold, a key's and a batch's
//	loader.go    the load stage: the loader's call, its entry, the store
//	fallback.go  the fallback chain: stale copy, default, error
//	result.go    what a call returns
//
// Each stage's batch form (GetMany, many.go) sits beside its single-key
// form. The stages reach Redis, a backend or the embedded default through
// one seam, package internal/coord; the loader's call is package
// internal/loadcall. docs/design.md ("The code, file by file") names every
// file and the internal packages of the other mechanisms, and
// `go run scripts/coldpath.go` lists the files a cold Get with Redis and
// Lock runs.

package resilience

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/obs"
	"github.com/herdguard/herdguard/internal/rcache"
)

// LoadFunc loads the value of key: the expensive call the pipeline guards.
// It should honour ctx. Returning [ErrNotFound] says the key has no value.
type LoadFunc[V any] func(ctx context.Context, key string) (V, error)

// Name returns the pipeline's name.
func (p *Pipeline[V]) Name() string { return p.name }

// Get returns the value of key: from the caches if fresh, else from load,
// run once for all concurrent callers. It is [Pipeline.GetResult] without
// the details.
//
// The value is shared with the cache and with other callers: do not
// change a map, slice or pointee in it, or use [Builder.Clone].
func (p *Pipeline[V]) Get(ctx context.Context, key string, load LoadFunc[V]) (V, error) {
	if err := p.checkGet(ctx, key, load); err != nil {
		var zero V
		return zero, err
	}
	h, f, done := p.lookup(ctx, key, load)
	if done {
		if h.NotFound() {
			p.stats.L1NotFound()
			var zero V
			return zero, ErrNotFound
		}
		return p.out(h.Value()), nil
	}
	r, err := p.cloned(p.call(ctx, key, load, h, f))
	return r.Value, err
}

// GetResult is [Pipeline.Get] that also says where the value came from and
// whether the call failed open or fell back.
func (p *Pipeline[V]) GetResult(ctx context.Context, key string, load LoadFunc[V]) (Result[V], error) {
	if err := p.checkGet(ctx, key, load); err != nil {
		return Result[V]{}, err
	}
	h, f, done := p.lookup(ctx, key, load)
	if done {
		if h.NotFound() {
			p.stats.L1NotFound()
			return Result[V]{Source: SourceL1, NotFound: true}, ErrNotFound
		}
		return Result[V]{Value: p.out(h.Value()), Source: SourceL1}, nil
	}
	return p.cloned(p.call(ctx, key, load, h, f))
}

func (p *Pipeline[V]) checkGet(ctx context.Context, key string, load LoadFunc[V]) error {
	switch {
	case ctx == nil:
		return ErrNilContext
	case key == "":
		return ErrEmptyKey
	case load == nil:
		return ErrNilLoader
	case p.keyless:
		return wrongCall(p.name, "is Keyless: use Do")
	case p.closed.Load():
		return ErrClosed
	}
	return nil
}

// call is the rest of a call, from what L1 held for key: a span for the
// call and one for each stage that runs, when tracing is on (the L1 span
// records the lookup just made), then the shared load and the fallbacks.
func (p *Pipeline[V]) call(ctx context.Context, key string, load LoadFunc[V], h rcache.Hit[V], f cache.Freshness) (Result[V], error) {
	ctx, sp := p.tel.StartCall(ctx, key, p.l1 != nil, f == cache.Fresh, f.String())
	var r Result[V]
	var err error
	switch f {
	case cache.Fresh:
		r, err = fromHit(h)
	case cache.Stale:
		p.stats.Miss()
		r, err = p.miss(ctx, key, load, h.Entry(), true)
	default:
		p.stats.Miss()
		r, err = p.miss(ctx, key, load, rcache.Entry[V]{}, false)
	}
	p.finishCall(ctx, sp, &r, err)
	return r, err
}

// finishCall counts the call's outcome, and records it on its span and in
// the metrics; finishMany does it for a batch.
func (p *Pipeline[V]) finishCall(ctx context.Context, sp trace.Span, r *Result[V], err error) {
	countCall(&p.stats, r, err)
	if sp == nil && r.Cause == nil {
		return // nothing to record
	}
	c := obs.Call{Source: r.Source.String(), FailedOpen: r.FailedOpen, NotFound: r.NotFound, Err: err}
	if r.Cause != nil {
		c.Fallback = reason(r.Cause)
	}
	p.tel.FinishCall(ctx, sp, c)
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
		if r.Cause != nil {
			p.tel.FellBack(ctx, r.Source.String(), reason(r.Cause))
		}
	}
	var err error
	if len(b.errs) > 0 {
		err = b.errs
	}
	p.tel.FinishBatch(sp, sourceNames[:], counts[:], open, len(b.errs), err)
}

func fromEntry[V any](e *rcache.Entry[V], src Source) (Result[V], error) {
	if e.NotFound {
		return Result[V]{Source: src, NotFound: true}, ErrNotFound
	}
	return Result[V]{Value: e.Value, Source: src}, nil
}

func fromHit[V any](h rcache.Hit[V]) (Result[V], error) {
	if h.NotFound() {
		return Result[V]{Source: SourceL1, NotFound: true}, ErrNotFound
	}
	return Result[V]{Value: h.Value(), Source: SourceL1}, nil
}

// miss handles a call the in-process cache could not answer: one shared
// load per key, then the fallback chain for whoever it failed. stale is
// what L1 held for key, if anything (hasStale).
func (p *Pipeline[V]) miss(ctx context.Context, key string, load LoadFunc[V], stale rcache.Entry[V], hasStale bool) (Result[V], error) {
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
	return p.settleMiss(ctx, key, o, err, stale, hasStale, true)
}

// settleMiss is a miss's result once its shared load has ended with o and
// err: the load's result, or the fallback chain's (with a span of its own
// when spanned). stale is what L1 held for key, if anything (hasStale).
// GetMany settles each of its keys with it too.
func (p *Pipeline[V]) settleMiss(ctx context.Context, key string, o *outcome[V], err error, stale rcache.Entry[V], hasStale, spanned bool) (Result[V], error) {
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
	r, err := p.fallBack(ctx, key, err, stale.Value, hasStale, o.res.FailedOpen, spanned)
	r.FailOpenCause = o.res.FailOpenCause
	return r, err
}

// lookup is a call's one L1 read (a pipeline without L1 always misses).
// It reports done when the fresh entry it found answers the call with
// nothing more to record than a count: no span, since tracing is off or
// the caller's span is not sampled (see [telemetry.Config.HitSpans]).
// Otherwise [Pipeline.call] goes on from what it found. It allocates
// nothing on a hit.
func (p *Pipeline[V]) lookup(ctx context.Context, key string, load LoadFunc[V]) (rcache.Hit[V], cache.Freshness, bool) {
	if p.l1 == nil {
		return rcache.Hit[V]{}, cache.Miss, false
	}
	h, f := p.l1.Find(key)
	if f != cache.Fresh {
		return h, f, false
	}
	if p.beta > 0 && p.refreshEarly(h) {
		p.refreshAsync(ctx, key, load, h.Written())
	}
	if p.tel.Tracing() && p.tel.HitSpans(ctx) {
		return h, f, false
	}
	p.stats.L1Hits.Inc()
	return h, f, true
}

// cloned applies Clone to a result's value.
func (p *Pipeline[V]) cloned(r Result[V], err error) (Result[V], error) {
	if c := p.writes.clone; c != nil && err == nil {
		r.Value = c(r.Value)
	}
	return r, err
}
