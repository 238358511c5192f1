package fallback

import (
	"context"
	"errors"
	"fmt"
)

// Source says which link of the chain answered.
type Source uint8

const (
	// None means no link answered: the error stands.
	None Source = iota
	// Stale means a stale copy was served.
	Stale
	// Default means the default was served.
	Default
)

// String returns "none", "stale" or "default".
func (s Source) String() string {
	switch s {
	case Stale:
		return "stale"
	case Default:
		return "default"
	}
	return "none"
}

// Chain is a fallback policy: which errors it answers, whether it serves
// stale copies, and the default it serves when there is none. The zero
// value is ready to use: it serves the stale copy it is offered for any
// error but the caller's own cancellation, and has no default. A Chain
// must not be changed once in use; it is then safe for concurrent use.
type Chain[V any] struct {
	// NoStale turns stale copies off.
	// default: false (stale copies are served)
	NoStale bool
	// Default, if not nil, computes the safe default for key, given the
	// ctx passed to Resolve and the call's error. If it fails, Resolve
	// returns its error and the call's together in a [*DefaultError].
	// default: nil (no default: the call's error stands)
	Default func(ctx context.Context, key string, cause error) (V, error)
	// Handles decides which errors the chain answers.
	// default: every error except the caller's own cancellation
	// (context.Canceled): a caller that gave up wants no value
	Handles func(err error) bool
}

// Value returns a function for [Chain.Default] that always returns v,
// whatever the key and the cause.
func Value[V any](v V) func(context.Context, string, error) (V, error) {
	return func(context.Context, string, error) (V, error) { return v, nil }
}

// Resolve answers for a call to key that failed with cause. stale is the
// caller's stale copy, and hasStale says whether it has one still within
// its grace period. Resolve returns the value served and which link served
// it; if none did, it returns the zero value, [None] and cause, or a
// [*DefaultError] holding both errors if the default failed. A nil cause,
// or one that Handles refuses, is returned as it is, with [None]. key is
// only passed on to Default.
func (c *Chain[V]) Resolve(ctx context.Context, key string, cause error, stale V, hasStale bool) (V, Source, error) {
	var zero V
	if cause == nil || !c.handles(cause) {
		return zero, None, cause
	}
	if hasStale && !c.NoStale {
		return stale, Stale, nil
	}
	if c.Default != nil {
		v, err := c.Default(ctx, key, cause)
		if err != nil {
			return zero, None, &DefaultError{Err: err, Cause: cause}
		}
		return v, Default, nil
	}
	return zero, None, cause
}

func (c *Chain[V]) handles(err error) bool {
	if c.Handles != nil {
		return c.Handles(err)
	}
	return !errors.Is(err, context.Canceled)
}

// DefaultError reports that the default itself failed. Both errors are
// kept: errors.Is matches either.
type DefaultError struct {
	// Err is the default's own error.
	Err error
	// Cause is the call's error that sent it to the default.
	Cause error
}

// Error returns both messages, the default's first.
func (e *DefaultError) Error() string {
	return fmt.Sprintf("fallback: default failed: %v (after: %v)", e.Err, e.Cause)
}

// Unwrap returns both errors.
func (e *DefaultError) Unwrap() []error { return []error{e.Err, e.Cause} }
