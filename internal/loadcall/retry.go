package loadcall

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/herdguard/herdguard/internal/retryloop"
)

// Retry is resilience's RetrySettings, field for field (one converts to
// the other); its doc comments say what each field does and defaults to.
type Retry struct {
	MaxAttempts         int
	Initial             time.Duration
	Multiplier          float64
	RandomizationFactor float64
	Max                 time.Duration
	MaxElapsed          time.Duration
	Retryable           func(err error) bool
}

// WithDefaults is s with each zero field given its default.
func (s Retry) WithDefaults() Retry {
	if s.MaxAttempts == 0 {
		s.MaxAttempts = 3
	}
	if s.Initial == 0 {
		s.Initial = 100 * time.Millisecond
	}
	if s.Multiplier == 0 {
		s.Multiplier = 2
	}
	if s.RandomizationFactor == 0 {
		s.RandomizationFactor = 0.5
	}
	if s.Max == 0 {
		s.Max = 2 * time.Second
	}
	if s.MaxElapsed == 0 {
		s.MaxElapsed = 10 * time.Second
	}
	return s
}

// Validate names what is wrong with s, or returns "".
func (s Retry) Validate() string {
	switch {
	case s.MaxAttempts < 0:
		return "MaxAttempts must not be negative"
	case s.Initial < 0:
		return "Initial must not be negative"
	case s.Max < 0:
		return "Max must not be negative"
	case s.MaxElapsed < 0:
		return "MaxElapsed must not be negative"
	case s.Multiplier != 0 && s.Multiplier < 1:
		return "Multiplier must be at least 1"
	case s.RandomizationFactor < 0 || s.RandomizationFactor >= 1:
		return "RandomizationFactor must be in [0, 1)"
	}
	return ""
}

// Policy is s as a policy of the shared retry loop.
func (s *Retry) Policy() retryloop.Policy {
	return retryloop.Policy{
		MaxAttempts:         s.MaxAttempts,
		Initial:             s.Initial,
		Multiplier:          s.Multiplier,
		RandomizationFactor: s.RandomizationFactor,
		Max:                 s.Max,
		MaxElapsed:          s.MaxElapsed,
	}
}

// Retryable reports whether err may be retried under c's Retry: its
// class allows it, it is not permanent, and the Retryable hook, if any,
// says so.
func (c *Caller) Retryable(err error) bool {
	var perm *backoff.PermanentError
	switch {
	case !Classify(err, c.IsPanic).Retryable(), errors.As(err, &perm):
		return false
	case c.Retry != nil && c.Retry.Retryable != nil:
		// A panic in the hook ends the retries, as a permanent error
		// would.
		var ok bool
		return c.hook("retryable", func() { ok = c.Retry.Retryable(err) }) == nil && ok
	}
	return true
}

// Run runs attempt until it succeeds, fails for good, or the backoff
// gives up, through the loop httpx shares, under c's Retry (once without
// one). attempt gets the attempt number, from 1. No wait runs past ctx's
// deadline: the last error returns at once instead.
//
// failure, if not nil, is the pipeline's IsFailure test: an error that is
// not a failure is an answer, and is not retried either.
func Run[V any](ctx context.Context, c *Caller, failure func(error) bool, attempt func(n int) (V, error)) (V, error) {
	if c.Retry == nil {
		v, err := attempt(1)
		return v, unwrapPermanent(err)
	}
	pol := c.Retry.Policy()
	v, err := retryloop.Run(ctx, &pol, func(n int) (V, retryloop.Next, error) {
		v, err := attempt(n)
		again := err != nil && c.Retryable(err) && (failure == nil || failure(err))
		return v, retryloop.Next{Retry: again}, err
	}, nil)
	return v, unwrapPermanent(err)
}
