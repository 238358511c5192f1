package resilience

import (
	"context"
	"errors"

	"github.com/herdguard/herdguard/fallback"
	"github.com/herdguard/herdguard/telemetry"
	"go.opentelemetry.io/otel/trace"
)

// fallBack runs the fallback chain for a call whose load failed with
// cause, with a span of its own when spanned.
func (p *Pipeline[V]) fallBack(ctx context.Context, key string, cause error, stale V, hasStale, failedOpen, spanned bool) (Result[V], error) {
	var sp trace.Span
	if spanned && p.tel.Tracing() {
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
