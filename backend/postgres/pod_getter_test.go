package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/resilience"
)

// newGetter returns a pod's getters, of one key and of many: a pipeline
// on the backend, as a service builds it.
func newGetter(b *Backend, c podConfig) (getFunc, manyFunc, func(), error) {
	ttl := c.Fresh
	if ttl == 0 {
		ttl = time.Minute
	}
	pipe, err := resilience.New[string](c.Name).
		Cache(ttl).
		Backend(b).
		BackendOptions(resilience.BackendOptions{OpTimeout: c.OpTimeout, Breaker: breaker.Settings{OpenTimeout: c.BreakerOpen}}).
		Lock(resilience.LockSettings{Heartbeat: c.Beat, Lease: c.Lease}).
		Build()
	if err != nil {
		return nil, nil, nil, err
	}
	get := func(ctx context.Context, key string, load func(context.Context, string) (string, error)) (string, string, error) {
		r, err := pipe.GetResult(ctx, key, load)
		src := r.Source.String()
		if r.FailedOpen {
			src += failedOpen(r.FailOpenCause)
		}
		return r.Value, src, err
	}
	many := func(ctx context.Context, keys []string, load resilience.LoadManyFunc[string]) (map[string]resilience.Result[string], error) {
		return pipe.GetMany(ctx, keys, load)
	}
	return get, many, func() { _ = pipe.Close() }, nil
}

// failedOpen is the suffix of the source of a call that failed open
// because of cause: "+failed-open" and the kind of cause, so that a
// burst's log says why its calls went on without the backend.
func failedOpen(cause error) string {
	var kind string
	switch {
	case errors.Is(cause, breaker.ErrOpen):
		kind = "breaker"
	case errors.Is(cause, context.DeadlineExceeded):
		kind = "timeout: " + cause.Error()
	case cause == nil:
		kind = "none"
	default:
		kind = cause.Error()
		if len(kind) > 60 {
			kind = kind[:60]
		}
	}
	return "+failed-open(" + kind + ")"
}
