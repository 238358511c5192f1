package resilience

import (
	"time"

	"github.com/cenkalti/backoff/v4"
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
