package resilience

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/internal/loadcall"
	"github.com/herdguard/herdguard/telemetry"
)

// DoFunc is the work of a keyless call, such as an HTTP POST.
type DoFunc[V any] func(ctx context.Context) (V, error)

// Do runs fn through the breaker, retry, timeouts and default of a
// [Builder.Keyless] pipeline. It is [Pipeline.DoResult] without the
// details.
func (p *Pipeline[V]) Do(ctx context.Context, fn DoFunc[V]) (V, error) {
	r, err := p.DoResult(ctx, fn)
	return r.Value, err
}

// DoResult is [Pipeline.Do] that also says whether the default answered.
// fn runs on the caller's context (bounded by CallTimeout): nobody else
// waits for it.
func (p *Pipeline[V]) DoResult(ctx context.Context, fn DoFunc[V]) (Result[V], error) {
	switch {
	case ctx == nil:
		return Result[V]{}, ErrNilContext
	case fn == nil:
		return Result[V]{}, ErrNilLoader
	case p.keyStages:
		return Result[V]{}, wrongCall(p.name, "has stages that need a key (Cache, SingleFlight, Lock): use Get, or build it Keyless")
	case p.closed.Load():
		return Result[V]{}, ErrClosed
	}
	var sp trace.Span
	if p.tel.Tracing() {
		ctx, sp = p.tel.Start(ctx, telemetry.SpanDo, trace.WithAttributes(p.tel.PipelineAttr))
	}
	parent := ctx
	if p.callTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.callTimeout)
		defer cancel()
	}
	v, _, err := loadcall.Call(ctx, &p.lc, "", loadcall.Func[V]{Do: fn})
	var r Result[V]
	switch {
	case err == nil:
		r = Result[V]{Value: v, Source: SourceLoader}
	case parent.Err() != nil:
		// The caller gave up: no fallback, its own error.
	default:
		if ctx.Err() != nil && !errors.Is(err, ErrTimeout) {
			err = timedOut("call", p.callTimeout, err)
		}
		r, err = p.fallBack(parent, "", err, r.Value, false, false, true)
	}
	p.finishCall(parent, sp, &r, err)
	return r, err
}
