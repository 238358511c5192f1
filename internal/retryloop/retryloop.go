// Package retryloop is the one retry loop of herdguard: the pipeline's
// Retry stage (resilience) and the HTTP transport (resilience/httpx) both
// run their attempts through [Run].
//
// The schedule between attempts is github.com/cenkalti/backoff/v4's
// exponential backoff. An attempt may give a wait hint (an HTTP
// Retry-After, say): the next attempt then waits for the longer of the
// hint and the backoff. No wait runs past the context's deadline: a wait
// that would end after it is not started, and the last outcome is
// returned at once.
package retryloop

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Policy bounds the attempts of one [Run]. Its fields are used as they
// are: defaults are the caller's business.
type Policy struct {
	MaxAttempts int // the most attempts, the first included; below 2, one

	// The backoff: Initial, then each interval Multiplier times the last,
	// up to Max, each spread at random over [i*(1-r), i*(1+r)] for r the
	// RandomizationFactor.
	Initial, Max                    time.Duration
	Multiplier, RandomizationFactor float64

	// MaxElapsed, if positive, stops the attempts when the next one would
	// start later than this after the first one; MaxHint, if positive, is
	// the longest hint honoured: an attempt that asks for a longer wait
	// ends the attempts.
	MaxElapsed, MaxHint time.Duration

	// Now and Sleep are the loop's clock: time.Now and [Sleep] when nil.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
}

// Next is what an attempt says about the attempt after it.
type Next struct {
	// Retry says the outcome is worth another attempt.
	Retry bool
	// Wait, if positive, is the least wait before that attempt.
	Wait time.Duration
}

// NewBackOff returns a fresh schedule for one run: backoff state is never
// shared between runs. It stops after MaxAttempts-1 intervals; MaxElapsed
// is applied by Run, hints included.
func (p *Policy) NewBackOff() backoff.BackOff {
	eb := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(p.Initial),
		backoff.WithMultiplier(p.Multiplier),
		backoff.WithRandomizationFactor(p.RandomizationFactor),
		backoff.WithMaxInterval(p.Max),
		backoff.WithMaxElapsedTime(0),
	)
	return backoff.WithMaxRetries(eb, uint64(max(p.MaxAttempts-1, 0)))
}

// Run calls attempt, with the attempt number from 1, until an attempt
// says not to retry, the policy allows no more, or ctx ends, and returns
// the last attempt's outcome.
//
// drop, if not nil, releases an outcome that will not be returned before
// the wait that follows it (an HTTP response's body, say). When ctx ends
// during a wait, Run returns the last outcome, or, if drop released it,
// the zero value and ctx's error.
func Run[V any](ctx context.Context, p *Policy, attempt func(n int) (V, Next, error), drop func(V)) (V, error) {
	now := p.Now
	if now == nil {
		now = time.Now
	}
	start := now()
	var bo backoff.BackOff // made on the first retry: most calls need none
	for n := 1; ; n++ {
		v, next, err := attempt(n)
		if !next.Retry || n >= p.MaxAttempts {
			return v, err
		}
		if bo == nil {
			bo = p.NewBackOff()
		}
		wait, ok := p.wait(ctx, bo, next.Wait, start, now())
		if !ok {
			return v, err
		}
		if drop != nil {
			drop(v)
		}
		if serr := p.sleep(ctx, wait); serr != nil {
			if drop != nil {
				var zero V
				return zero, serr
			}
			return v, err
		}
	}
}

// wait returns how long to wait before the next attempt: the backoff, or
// the hint if longer. ok is false when there is to be no next attempt: the
// backoff stopped, the hint is longer than MaxHint, or the wait would pass
// MaxElapsed or ctx's deadline.
func (p *Policy) wait(ctx context.Context, bo backoff.BackOff, hint time.Duration, start, now time.Time) (time.Duration, bool) {
	if ctx.Err() != nil {
		return 0, false
	}
	wait := bo.NextBackOff()
	if wait == backoff.Stop {
		return 0, false
	}
	if hint > 0 {
		if p.MaxHint > 0 && hint > p.MaxHint {
			return 0, false
		}
		wait = max(wait, hint)
	}
	if p.MaxElapsed > 0 && now.Sub(start)+wait > p.MaxElapsed {
		return 0, false
	}
	if dl, ok := ctx.Deadline(); ok && now.Add(wait).After(dl) {
		return 0, false
	}
	return wait, true
}

func (p *Policy) sleep(ctx context.Context, d time.Duration) error {
	if p.Sleep != nil {
		return p.Sleep(ctx, d)
	}
	return Sleep(ctx, d)
}

// Sleep waits for d or until ctx ends, and then returns ctx's error.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
