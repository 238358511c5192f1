package backend

import (
	"context"
	"time"

	"github.com/herdguard/herdguard/internal/opbudget"
)

// Budget returns, for a context that the pipeline passed to a method of a
// [Shared], the caller's context and the operation timeout
// (resilience.BackendOptions.OpTimeout). The context the method gets ends
// when the operation timeout has passed since the pipeline called it,
// which bounds any backend as it is. A backend with a queue of its own (a
// pool of connections that a burst of calls waits for) may instead wait in
// that queue under the caller's context, and count the operation timeout
// from when its request is sent, so that the burst's own queueing is not
// taken for a failing backend; it must then bound each request by the
// timeout itself. ok is false for a context that carries no budget (a
// release, or a call from outside the pipeline): ctx's own deadline, if
// any, bounds it.
func Budget(ctx context.Context) (caller context.Context, timeout time.Duration, ok bool) {
	return opbudget.From(ctx)
}
