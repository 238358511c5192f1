// Package opbudget carries, in the context of each backend operation, the
// caller's context and the operation timeout: the pipeline (package
// resilience) puts them there, and package backend's Budget reads them
// back for a backend.
package opbudget

import (
	"context"
	"time"
)

// key is the context key of the budget.
type key struct{}

type budget struct {
	caller  context.Context
	timeout time.Duration
}

// With returns ctx carrying caller and timeout as the operation's budget.
func With(ctx, caller context.Context, timeout time.Duration) context.Context {
	return context.WithValue(ctx, key{}, &budget{caller: caller, timeout: timeout})
}

// From returns the budget ctx carries; ok is false (and caller is ctx)
// when it carries none.
func From(ctx context.Context) (caller context.Context, timeout time.Duration, ok bool) {
	b, ok := ctx.Value(key{}).(*budget)
	if !ok {
		return ctx, 0, false
	}
	return b.caller, b.timeout, true
}
