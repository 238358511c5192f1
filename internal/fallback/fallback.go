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

// Chain is the fallback policy of one pipeline. The zero value serves stale
// copies and nothing else. A Chain is immutable once built and safe for
// concurrent use.
type Chain[V any] struct {
	// NoStale turns stale copies off.
	// default: false (stale copies are served)
	NoStale bool
	// Default, if not nil, computes the safe default for key. It may
	// return an error, which then stands instead of the original one.
	// default: nil (no default)
	Default func(ctx context.Context, key string, cause error) (V, error)
	// Handles decides which errors the chain answers.
	// default: every error except the caller's own cancellation
	// (context.Canceled): a caller that gave up wants no value
	Handles func(err error) bool
}

// Value returns a Default func that always returns v.
func Value[V any](v V) func(context.Context, string, error) (V, error) {
	return func(context.Context, string, error) (V, error) { return v, nil }
}

// Resolve answers for a call to key that failed with cause. stale is the
// stale copy if the caller has one (hasStale). It returns the value served
// and which link served it, or cause (possibly wrapped by the default's own
// error) with [None].
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
	Err   error // the default's error
	Cause error // the call's error that sent it to the default
}

func (e *DefaultError) Error() string {
	return fmt.Sprintf("fallback: default failed: %v (after: %v)", e.Err, e.Cause)
}

// Unwrap returns both errors.
func (e *DefaultError) Unwrap() []error { return []error{e.Err, e.Cause} }
