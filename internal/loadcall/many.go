package loadcall

import (
	"context"
	"slices"
	"sync/atomic"
	"time"
)

// CallMany calls load once for keys, through the loader's breaker,
// retry and timeout as one call. The per-key errors the loader returns
// (see Caller.KeyErrors) fail those keys only and count as a success.
func CallMany[V any](ctx context.Context, c *Caller, keys []string, load func(context.Context, []string) (map[string]V, error)) (map[string]V, map[string]error, time.Duration, error) {
	type got struct {
		vals map[string]V
		errs map[string]error
	}
	// An attempt abandoned at its timeout may still finish: each attempt
	// stores what it got, and the one that succeeded is read after.
	var last atomic.Pointer[got]
	_, took, err := Call(ctx, c, keys[0], Func[V]{Load: func(ctx context.Context, _ string) (V, error) {
		var zero V
		vals, err := load(ctx, slices.Clone(keys))
		if ke, ok := c.KeyErrors(err); ok {
			last.Store(&got{vals, ke})
			return zero, nil
		}
		if err == nil {
			last.Store(&got{vals: vals})
		}
		return zero, err
	}})
	if err != nil {
		return nil, nil, took, err
	}
	g := last.Load()
	if g == nil {
		return nil, nil, took, c.Exited
	}
	return g.vals, g.errs, took, nil
}
