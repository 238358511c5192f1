package resilience

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/cenkalti/backoff/v4"
	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/coord"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/telemetry"
)

// loadAndStore calls the loader and stores what it returns (a value, or a
// not-found when negative caching is on) in L2 and L1, under g's lease
// (nil: unlocked).
func (p *Pipeline[V]) loadAndStore(ctx context.Context, key string, load LoadFunc[V], g *coord.Grant, o *outcome[V]) error {
	p.countLoad(ctx, g, o.res.FailedOpen)
	lctx, ttl := withLoaderTTL(ctx) // for SetTTL
	if g != nil && !o.res.FailedOpen {
		lctx = withFence(lctx, key, g.Lease.Fence()) // for Fence
	}
	v, took, err := p.callLoader(lctx, key, load)
	notFound := errors.Is(err, ErrNotFound)
	if err != nil && !(notFound && p.negTTL > 0) {
		if notFound {
			o.res = Result[V]{Source: SourceLoader, NotFound: true, FailedOpen: o.res.FailedOpen}
		}
		return err
	}
	var fence int64
	if g != nil {
		fence = g.Lease.Fence()
	}
	e := p.newEntry(v, notFound, took, fence)
	p.applyLoaderTTL(&e, ttl)
	p.store(ctx, key, e, g, o)
	o.res.Source = SourceLoader
	if notFound {
		o.res.NotFound = true
		return ErrNotFound
	}
	o.res.Value = v
	return nil
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
	p.countBatch(ctx, items)
	stop := p.holdMany(ctx, items)
	vals, keyErrs, took, err := p.callLoadMany(withFences(ctx, items), keys, load)
	stop()
	allNotFound := errors.Is(err, ErrNotFound)
	if allNotFound {
		err = nil
	}
	var release []*backend.Lease
	var writes []rcache.Write[V]
	var written []*loadItem
	entries := make(map[string]rcache.Entry[V], len(items))
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
			w := rcache.Write[V]{Key: it.key, Entry: e}
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

// newEntry stamps a loaded value with its times.
func (p *Pipeline[V]) newEntry(v V, notFound bool, took time.Duration, fence int64) rcache.Entry[V] {
	now := time.Now()
	ttl, grace := p.ttl, p.grace
	if notFound {
		ttl, grace = p.negTTL, 0
	}
	ttl = cache.Jitter(ttl, p.jitter)
	return rcache.Entry[V]{
		Value: v, NotFound: notFound,
		Written: now, Expires: now.Add(ttl), StaleUntil: now.Add(ttl + grace),
		LoadDuration: took, Fence: fence,
	}
}

// callLoader runs the loader behind the breaker, retry and timeout. It
// returns how long the successful (or last) attempt took.
func (p *Pipeline[V]) callLoader(ctx context.Context, key string, load LoadFunc[V]) (V, time.Duration, error) {
	return p.callFunc(ctx, key, loader[V]{load: load})
}

// loader is the user's function of a call: a keyed load, or a keyless
// [DoFunc], carried as it is so that no adapter closure is allocated.
type loader[V any] struct {
	load LoadFunc[V]
	do   DoFunc[V]
}

func (l loader[V]) call(ctx context.Context, key string) (V, error) {
	if l.do != nil {
		return l.do(ctx)
	}
	return l.load(ctx, key)
}

// callFunc is callLoader for either kind of function.
func (p *Pipeline[V]) callFunc(ctx context.Context, key string, fn loader[V]) (V, time.Duration, error) {
	if p.retry == nil {
		v, took, err := p.attempt(ctx, key, fn, 1)
		return v, took, unwrapPermanent(err)
	}
	var took time.Duration
	var failure func(error) bool
	if p.isFailure != nil {
		failure = p.isLoadFailure
	}
	v, err := retry(ctx, p.retry, failure, func(n int) (V, error) {
		var v V
		var err error
		v, took, err = p.attempt(ctx, key, fn, n)
		return v, err
	})
	return v, took, err
}

// attempt is one loader call: breaker, timeout, panic recovery, span.
func (p *Pipeline[V]) attempt(ctx context.Context, key string, fn loader[V], n int) (V, time.Duration, error) {
	var zero V
	var sp trace.Span
	if p.tel.Tracing() {
		ctx, sp = p.tel.Start(ctx, telemetry.SpanLoad, trace.WithAttributes(telemetry.Attempt.Int(n)))
		defer sp.End()
	}
	// The clock is read only for what needs the duration: a keyed load
	// (stamped on its entry) or metrics. The breaker reads its own for a
	// slow-call threshold.
	timed := fn.do == nil || p.tel.Metering()
	var v V
	var took time.Duration
	var err error
	ran := false
	run := func() error {
		ran = true
		if sp != nil && p.br != nil {
			sp.SetAttributes(telemetry.BreakerState.String(p.br.State().String()))
		}
		var start time.Time
		if timed {
			start = time.Now()
		}
		v, err = p.runTimed(ctx, key, fn)
		if timed {
			took = time.Since(start)
		}
		if ctx.Err() != nil && !errors.Is(err, ErrTimeout) {
			// The flight's or the caller's own deadline, not the loader's
			// fault: it counts neither way.
			return breaker.Ignore
		}
		return err
	}
	if p.br == nil {
		_ = run()
	} else if refused := p.br.Execute(run); !ran {
		if sp != nil {
			sp.SetAttributes(telemetry.BreakerState.String(p.br.State().String()))
			sp.AddEvent("breaker refused the call")
		}
		return zero, 0, refused
	}
	p.stats.loads.Add(1)
	if p.tel.Metering() {
		p.tel.Load(ctx, classifyLoad(err).outcome(), took)
	}
	if sp != nil && err != nil && !errors.Is(err, ErrNotFound) {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	}
	return v, took, err
}

// runTimed calls fn with the attempt timeout. When fn ignores its context
// past the timeout, the attempt returns anyway and fn's goroutine finishes
// on its own; its result is dropped. Without a timeout (a Keyless pipeline
// without [Builder.Timeout]) fn runs on the caller's goroutine, with no
// timer and no goroutine.
func (p *Pipeline[V]) runTimed(ctx context.Context, key string, fn loader[V]) (V, error) {
	if p.timeout <= 0 {
		return safeLoad(ctx, key, fn)
	}
	actx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	ch := make(chan attemptResult[V], 1) // buffered: fn's goroutine never blocks, even once nobody waits
	// fn's goroutine ends when fn returns; an attempt given up at its
	// deadline does not wait for it.
	go func() {
		v, err := safeLoad(actx, key, fn)
		ch <- attemptResult[V]{v, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil && actx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
			return r.v, timedOut("loader attempt", p.timeout, r.err)
		}
		return r.v, r.err
	case <-actx.Done():
		var zero V
		if err := ctx.Err(); err != nil {
			return zero, err
		}
		return zero, timedOut("loader attempt", p.timeout, context.DeadlineExceeded)
	}
}

// attemptResult is what fn returned to a timed attempt.
type attemptResult[V any] struct {
	v   V
	err error
}

// safeLoad calls fn and turns a panic into a [*PanicError].
func safeLoad[V any](ctx context.Context, key string, fn loader[V]) (v V, err error) {
	defer recoverPanic("loader", &err)
	return fn.call(ctx, key)
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
func (p *Pipeline[V]) applyLoaderTTL(e *rcache.Entry[V], h *loaderTTL) {
	d := time.Duration(h.d.Load())
	if d == 0 || e.NotFound {
		return
	}
	ttl := cache.Jitter(min(d, p.ttl), p.jitter)
	e.Expires = e.Written.Add(ttl)
	e.StaleUntil = e.Expires.Add(p.grace)
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

// unwrapPermanent returns the error a [Permanent] wrapped, so callers get
// their loader's own error whether or not Retry is configured.
func unwrapPermanent(err error) error {
	if err == nil {
		return nil
	}
	var perm *backoff.PermanentError
	if errors.As(err, &perm) {
		return perm.Err
	}
	return err
}
