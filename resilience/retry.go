package resilience

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/herdguard/herdguard/internal/retryloop"
)

// RetrySettings configures [Builder.Retry]. Zero fields take defaults.
//
// Retry sits inside the shared load and outside the breaker and the
// per-attempt timeout: the breaker sees every attempt (so a dependency that
// keeps failing opens it, and an open breaker stops the retries at once),
// each attempt gets its own Timeout, and the lock's watchdog keeps the lease
// while the backoff sleeps. The flight's deadline, or for [Pipeline.Do] the
// caller's context and CallTimeout, bounds everything: a backoff that would
// end after that deadline is not slept, and the last error returns at once.
type RetrySettings struct {
	// MaxAttempts is the most attempts, the first included.
	// default: 3
	MaxAttempts int
	// Initial is the first backoff interval; each next one is Multiplier
	// times longer, spread by RandomizationFactor at random.
	// default: 100 milliseconds
	Initial time.Duration
	// Multiplier grows the interval.
	// default: 2
	Multiplier float64
	// RandomizationFactor spreads each interval over
	// [i*(1-f), i*(1+f)].
	// default: 0.5
	RandomizationFactor float64
	// Max caps one interval.
	// default: 2 seconds
	Max time.Duration
	// MaxElapsed stops retrying once this much time has passed since the
	// first attempt.
	// default: 10 seconds
	MaxElapsed time.Duration
	// Retryable decides which errors are retried. Context errors, an open
	// breaker, [ErrNotFound] and errors wrapped by [Permanent] never are.
	// default: every other error
	Retryable func(err error) bool
}

// Permanent wraps err so that it is not retried.
func Permanent(err error) error { return backoff.Permanent(err) }

func (s RetrySettings) withDefaults() RetrySettings {
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

func (s RetrySettings) validate() string {
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

// policy is s as a policy of the shared retry loop.
func (s *RetrySettings) policy() retryloop.Policy {
	return retryloop.Policy{
		MaxAttempts:         s.MaxAttempts,
		Initial:             s.Initial,
		Multiplier:          s.Multiplier,
		RandomizationFactor: s.RandomizationFactor,
		Max:                 s.Max,
		MaxElapsed:          s.MaxElapsed,
	}
}

// retryable reports whether err may be retried under s.
func (s *RetrySettings) retryable(err error) bool {
	var perm *backoff.PermanentError
	switch {
	case !classifyLoad(err).retryable(), errors.As(err, &perm):
		return false
	case s.Retryable != nil:
		// A panic in the hook ends the retries, as a permanent error
		// would.
		var ok bool
		return callHook("retryable", func() { ok = s.Retryable(err) }) == nil && ok
	}
	return true
}

// retry runs attempt until it succeeds, fails for good, or the backoff
// gives up, through the loop httpx shares. attempt gets the attempt
// number, from 1. No wait runs past ctx's deadline: the last error
// returns at once instead.
//
// failure, if not nil, is the pipeline's IsFailure test: an error that is
// not a failure is an answer, and is not retried either.
func retry[V any](ctx context.Context, s *RetrySettings, failure func(error) bool, attempt func(n int) (V, error)) (V, error) {
	if s == nil {
		v, err := attempt(1)
		return v, unwrapPermanent(err)
	}
	pol := s.policy()
	v, err := retryloop.Run(ctx, &pol, func(n int) (V, retryloop.Next, error) {
		v, err := attempt(n)
		again := err != nil && s.retryable(err) && (failure == nil || failure(err))
		return v, retryloop.Next{Retry: again}, err
	}, nil)
	return v, unwrapPermanent(err)
}
