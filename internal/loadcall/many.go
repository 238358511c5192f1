package loadcall

import (
	"context"
	"slices"
	"time"

	"github.com/herdguard/herdguard/cache"
)

// CallMany calls load once for keys, through the loader's breaker,
// retry and timeout as one call. The per-key errors the loader returns
// (see Caller.KeyErrors) fail those keys only and count as a success.
// The answer is the answering attempt's own: an attempt abandoned at its
// timeout that returns later is dropped, as Call drops it.
func CallMany[V any](ctx context.Context, c *Caller, keys []string, load func(context.Context, []string) (map[string]V, error)) (map[string]V, map[string]error, time.Duration, error) {
	type got struct {
		vals map[string]V
		errs map[string]error
	}
	g, took, err := Call(ctx, c, keys[0], Func[got]{Load: func(ctx context.Context, _ string) (got, error) {
		vals, err := load(ctx, slices.Clone(keys))
		if ke, ok := c.KeyErrors(err); ok {
			return got{vals, ke}, nil
		}
		return got{vals: vals}, err
	}})
	if err != nil {
		return nil, nil, took, err
	}
	return g.vals, g.errs, took, nil
}

// One turns a batch's loader into the loader of one key (for a refresh):
// the key's error among the per-key errors is its error; a key left out
// of the values is not found.
func One[V any](c *Caller, load func(context.Context, []string) (map[string]V, error)) func(context.Context, string) (V, error) {
	return func(ctx context.Context, key string) (V, error) {
		var zero V
		m, err := load(ctx, []string{key})
		if ke, ok := c.KeyErrors(err); ok {
			if kerr := ke[key]; kerr != nil {
				return zero, kerr
			}
			err = nil
		}
		if err != nil {
			return zero, err
		}
		v, ok := m[key]
		if !ok {
			return zero, cache.ErrNotFound
		}
		return v, nil
	}
}
