package postgres

import (
	"context"
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
	// These tests are about the lock, not about timeouts: unless a test
	// sets one or asks for the defaults, a generous operation timeout
	// keeps a loaded machine's delays from reading as database failures.
	// Under -race on two busy cores, single statements take longer than
	// the 200 ms default once they have their connection.
	op := c.OpTimeout
	if op == 0 && !c.Defaults {
		op = 10 * time.Second
	}
	pipe, err := resilience.New[string](c.Name).
		Cache(ttl).
		Backend(b).
		BackendOptions(resilience.BackendOptions{OpTimeout: op, Breaker: breaker.Settings{OpenTimeout: c.BreakerOpen}}).
		Lock(resilience.LockSettings{Heartbeat: c.Beat, Lease: c.Lease}).
		Build()
	if err != nil {
		return nil, nil, nil, err
	}
	get := func(ctx context.Context, key string, load func(context.Context, string) (string, error)) (string, string, error) {
		r, err := pipe.GetResult(ctx, key, load)
		src := r.Source.String()
		if r.FailedOpen {
			src += "+failed-open"
		}
		return r.Value, src, err
	}
	many := func(ctx context.Context, keys []string, load resilience.LoadManyFunc[string]) (map[string]resilience.Result[string], error) {
		return pipe.GetMany(ctx, keys, load)
	}
	return get, many, func() { _ = pipe.Close() }, nil
}
