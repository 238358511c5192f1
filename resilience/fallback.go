package resilience

import (
	"context"

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
