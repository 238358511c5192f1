package resilience

import (
	"context"

	"github.com/herdguard/herdguard/internal/loadcall"
)

// Fence returns the fence of the lock grant under which the current load
// of key runs: call it from a [LoadFunc] or [LoadManyFunc] that a
// pipeline with Lock called for a key it won. A key's fences only grow (a
// holder that takes over a dead one has a higher fence than it had), and
// the pipeline's own write-back into the cache is fenced by it; a loader
// that also writes elsewhere (a materialized view, a search index, a
// webhook) can fence that write the same way: keep the fence beside the
// row and refuse a write with a lower one (UPDATE ... WHERE fence < $1),
// so that a paused holder whose grant was taken over cannot overwrite the
// newer holder's write.
//
// ok is false outside a locked load of key: without Lock, for a load that
// failed open (Redis or the backend failing), after MaxWait, or for a key
// of a GetMany that this process loaded without the lock.
func Fence(ctx context.Context, key string) (fence int64, ok bool) {
	return loadcall.Fence(ctx, key)
}
