package resilience

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/telemetry"
)

// loadAndStore calls the loader and stores what it returns (a value, or a
// not-found when negative caching is on) in L2 and L1, under g's lease
// (nil: unlocked).
func (p *Pipeline[V]) loadAndStore(ctx context.Context, key string, load LoadFunc[V], g *grant, o *outcome[V]) error {
	lctx, ttl := withLoaderTTL(ctx) // for SetTTL
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
		fence = g.lease.Fence()
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

// newEntry stamps a loaded value with its times.
func (p *Pipeline[V]) newEntry(v V, notFound bool, took time.Duration, fence int64) cache.Entry[V] {
	now := time.Now()
	ttl, grace := p.ttl, p.grace
	if notFound {
		ttl, grace = p.negTTL, 0
	}
	ttl = cache.Jitter(ttl, p.jitter)
	return cache.Entry[V]{
		Value: v, NotFound: notFound,
		Written: now, Expires: now.Add(ttl), StaleUntil: now.Add(ttl + grace),
		LoadDuration: took, Fence: fence,
	}
}

// callLoader runs the loader behind the breaker, retry and timeout. It
// returns how long the successful (or last) attempt took.
func (p *Pipeline[V]) callLoader(ctx context.Context, key string, load LoadFunc[V]) (V, time.Duration, error) {
	var took time.Duration
	var failure func(error) bool
	if p.isFailure != nil {
		failure = p.countsAsFailure
	}
	v, err := retry(ctx, p.retry, failure, func(n int) (V, error) {
		var v V
		var err error
		v, took, err = p.attempt(ctx, key, load, n)
		return v, err
	})
	return v, took, err
}

// attempt is one loader call: breaker, timeout, panic recovery, span.
func (p *Pipeline[V]) attempt(ctx context.Context, key string, load LoadFunc[V], n int) (V, time.Duration, error) {
	var zero V
	var sp trace.Span
	if p.tel.Tracing() {
		ctx, sp = p.tel.Start(ctx, telemetry.SpanLoad, trace.WithAttributes(telemetry.Attempt.Int(n)))
		defer sp.End()
	}
	var done func(error, time.Duration)
	if p.br != nil {
		d, err := p.br.Allow()
		if sp != nil {
			sp.SetAttributes(telemetry.BreakerState.String(p.br.State().String()))
		}
		if err != nil {
			if sp != nil {
				sp.AddEvent("breaker refused the call")
			}
			return zero, 0, err
		}
		done = d
	}
	start := time.Now()
	v, err := p.runTimed(ctx, key, load)
	took := time.Since(start)
	if done != nil {
		if ctx.Err() != nil && !errors.Is(err, ErrTimeout) {
			// The flight's or the caller's own deadline, not the loader's
			// fault: it counts neither way.
			done(breaker.Ignore, took)
		} else {
			done(err, took)
		}
	}
	if p.tel.Metering() {
		p.tel.Load(ctx, loadOutcome(err), took)
	}
	if sp != nil && err != nil && !errors.Is(err, ErrNotFound) {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	}
	return v, took, err
}

func loadOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrNotFound):
		return "not_found"
	}
	return reason(err)
}

type loadResult[V any] struct {
	v   V
	err error
}

// runTimed calls load with the attempt timeout. When the loader ignores its
// context past the timeout, the attempt returns anyway and the loader's
// goroutine finishes on its own; its result is dropped.
func (p *Pipeline[V]) runTimed(ctx context.Context, key string, load LoadFunc[V]) (V, error) {
	if p.timeout <= 0 {
		return safeLoad(ctx, key, load)
	}
	actx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	ch := make(chan loadResult[V], 1) // buffered: a late loader never blocks
	go func() {
		v, err := safeLoad(actx, key, load)
		ch <- loadResult[V]{v, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil && actx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
			return r.v, &timeoutError{what: "loader attempt", after: p.timeout.String(), cause: r.err}
		}
		return r.v, r.err
	case <-actx.Done():
		var zero V
		if ctx.Err() != nil {
			return zero, ctx.Err()
		}
		return zero, &timeoutError{what: "loader attempt", after: p.timeout.String(), cause: context.DeadlineExceeded}
	}
}

// safeLoad calls load and turns a panic into a [*PanicError].
func safeLoad[V any](ctx context.Context, key string, load LoadFunc[V]) (v V, err error) {
	defer recoverPanic("loader", &err)
	return load(ctx, key)
}

// userIsFailure runs the user's IsFailure hook; a panic there counts the
// error as a failure.
func (p *Pipeline[V]) userIsFailure(err error) (failure bool) {
	defer func() {
		if recover() != nil {
			failure = true
		}
	}()
	return p.isFailure(err)
}

// countsAsFailure is the loader breaker's default failure test: the
// pipeline's IsFailure, never a not-found nor a caller's cancellation.
func (p *Pipeline[V]) countsAsFailure(err error) bool {
	switch {
	case err == nil, errors.Is(err, ErrNotFound), errors.Is(err, context.Canceled):
		return false
	case p.isFailure != nil:
		var pe *PanicError
		if errors.As(err, &pe) || errors.Is(err, ErrTimeout) {
			return true
		}
		return p.userIsFailure(err)
	}
	return true
}

func isBreakerRefusal(err error) bool {
	return errors.Is(err, breaker.ErrOpen) || errors.Is(err, breaker.ErrTooManyProbes)
}

// breakerObserver returns the OnStateChange of the pipeline's breakers: the
// user's callbacks, then a metric. Breakers call it outside their locks.
func (p *Pipeline[V]) breakerObserver(own, all func(string, breaker.State, breaker.State)) func(string, breaker.State, breaker.State) {
	return func(name string, from, to breaker.State) {
		p.logs.breakerChange(name, from, to)
		for _, fn := range [...]func(string, breaker.State, breaker.State){own, all} {
			if fn != nil {
				callSafely(fn, name, from, to)
			}
		}
		if p.tel != nil && p.tel.Metering() {
			p.tel.BreakerState(context.Background(), name, int64(to))
		}
	}
}

// callSafely calls a user's breaker callback: a panic there must not take
// down the call that happened to move the breaker.
func callSafely(fn func(string, breaker.State, breaker.State), name string, from, to breaker.State) {
	defer func() { _ = recover() }()
	fn(name, from, to)
}
