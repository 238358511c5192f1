// Package loadcall calls a pipeline's loader: behind the loader's
// breaker, retry and attempt timeout, with its panics recovered, its
// span and its metrics; it hands the loader its context (the place for
// SetTTL, the fences for Fence) and classifies what the loader returned,
// for the stages of package resilience after it. The load stage itself
// (storing what the loader returned, and releasing) stays in resilience.
package loadcall

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/cenkalti/backoff/v4"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/obs"
	"github.com/herdguard/herdguard/internal/timeout"
	"github.com/herdguard/herdguard/telemetry"
)

// ErrTimeout is matched by the error of a loader attempt that ran out of
// its timeout. Package resilience exports it as its ErrTimeout.
var ErrTimeout = errors.New("resilience: timeout")

// Caller is what a loader call needs of the pipeline it runs in, set
// once when the pipeline is built.
type Caller struct {
	Tel     *obs.Telemetry
	Breaker *breaker.Breaker // the loader's; nil without one
	Retry   *Retry           // with its defaults; nil without Retry
	Timeout time.Duration    // each attempt's; 0 for none
	// IsFailure is the pipeline's IsFailure hook; nil without one.
	IsFailure func(error) bool
	// Loads counts the loader's attempts, for Stats.
	Loads *atomic.Uint64
	// Panicked is the pipeline's error for a panic of stage with v, and
	// IsPanic reports whether err is one.
	Panicked func(stage string, v any) error
	IsPanic  func(err error) bool
	// KeyErrors returns the per-key errors a batch's loader returned in
	// err, if it did.
	KeyErrors func(err error) (map[string]error, bool)
}

// Func is the user's function of a call: a keyed load, or a keyless
// one, carried as it is so that no adapter closure is allocated.
type Func[V any] struct {
	Load func(ctx context.Context, key string) (V, error)
	Do   func(ctx context.Context) (V, error)
}

func (l Func[V]) call(ctx context.Context, key string) (V, error) {
	if l.Do != nil {
		return l.Do(ctx)
	}
	return l.Load(ctx, key)
}

// Call runs fn behind the breaker, retry and timeout. It returns how
// long the successful (or last) attempt took.
func Call[V any](ctx context.Context, c *Caller, key string, fn Func[V]) (V, time.Duration, error) {
	if c.Retry == nil {
		v, took, err := attempt(ctx, c, key, fn, 1)
		return v, took, unwrapPermanent(err)
	}
	var took time.Duration
	var failure func(error) bool
	if c.IsFailure != nil {
		failure = c.IsLoadFailure
	}
	v, err := Run(ctx, c, failure, func(n int) (V, error) {
		var v V
		var err error
		v, took, err = attempt(ctx, c, key, fn, n)
		return v, err
	})
	return v, took, err
}

// attempt is one loader call: breaker, timeout, panic recovery, span.
func attempt[V any](ctx context.Context, c *Caller, key string, fn Func[V], n int) (V, time.Duration, error) {
	var zero V
	var sp trace.Span
	if c.Tel.Tracing() {
		ctx, sp = c.Tel.Start(ctx, telemetry.SpanLoad, trace.WithAttributes(telemetry.Attempt.Int(n)))
		defer sp.End()
	}
	// The clock is read only for what needs the duration: a keyed load
	// (stamped on its entry) or metrics. The breaker reads its own for a
	// slow-call threshold.
	timed := fn.Do == nil || c.Tel.Metering()
	var v V
	var took time.Duration
	var err error
	ran := false
	run := func() error {
		ran = true
		if sp != nil && c.Breaker != nil {
			sp.SetAttributes(telemetry.BreakerState.String(c.Breaker.State().String()))
		}
		var start time.Time
		if timed {
			start = time.Now()
		}
		v, err = runTimed(ctx, c, key, fn)
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
	if c.Breaker == nil {
		_ = run()
	} else if refused := c.Breaker.Execute(run); !ran {
		if sp != nil {
			sp.SetAttributes(telemetry.BreakerState.String(c.Breaker.State().String()))
			sp.AddEvent("breaker refused the call")
		}
		return zero, 0, refused
	}
	c.Loads.Add(1)
	if c.Tel.Metering() {
		c.Tel.Load(ctx, Classify(err, c.IsPanic).Outcome(), took)
	}
	if sp != nil && err != nil && !errors.Is(err, cache.ErrNotFound) {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	}
	return v, took, err
}

// runTimed calls fn with the attempt timeout. When fn ignores its context
// past the timeout, the attempt returns anyway and fn's goroutine finishes
// on its own; its result is dropped. Without a timeout (a Keyless pipeline
// without Builder.Timeout) fn runs on the caller's goroutine, with no
// timer and no goroutine.
func runTimed[V any](ctx context.Context, c *Caller, key string, fn Func[V]) (V, error) {
	if c.Timeout <= 0 {
		return safeLoad(ctx, c, key, fn)
	}
	actx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	ch := make(chan attemptResult[V], 1) // buffered: fn's goroutine never blocks, even once nobody waits
	// fn's goroutine ends when fn returns; an attempt given up at its
	// deadline does not wait for it.
	go func() {
		v, err := safeLoad(actx, c, key, fn)
		ch <- attemptResult[V]{v, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil && actx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
			return r.v, timedOut(c.Timeout, r.err)
		}
		return r.v, r.err
	case <-actx.Done():
		var zero V
		if err := ctx.Err(); err != nil {
			return zero, err
		}
		return zero, timedOut(c.Timeout, context.DeadlineExceeded)
	}
}

// attemptResult is what fn returned to a timed attempt.
type attemptResult[V any] struct {
	v   V
	err error
}

// safeLoad calls fn and turns a panic into the pipeline's error of the
// "loader" stage.
func safeLoad[V any](ctx context.Context, c *Caller, key string, fn Func[V]) (v V, err error) {
	defer c.recover("loader", &err)
	return fn.call(ctx, key)
}

// hook calls fn, which runs a user's hook (IsFailure, Retryable), and
// returns its panic as the pipeline's error of stage, or nil. The caller
// decides what a panicking hook means.
func (c *Caller) hook(stage string, fn func()) (err error) {
	defer c.recover(stage, &err)
	fn()
	return nil
}

// recover, deferred, turns a panic of stage into the pipeline's error in
// *err.
func (c *Caller) recover(stage string, err *error) {
	if v := recover(); v != nil {
		*err = c.Panicked(stage, v)
	}
}

// timedOut is a loader attempt that ran out of its own timeout, after: it
// matches ErrTimeout and cause.
func timedOut(after time.Duration, cause error) error {
	return &timeout.Error{What: "resilience: loader attempt", After: after, Kind: ErrTimeout, Cause: cause}
}

// unwrapPermanent returns the error a Permanent wrapped, so callers get
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
