package resilience

import (
	"context"

	"github.com/herdguard/herdguard/internal/loadcall"
	"github.com/herdguard/herdguard/internal/retryloop"
)

// The tests of the loader call's rules (retry_test.go, outcome_test.go)
// reach internal/loadcall through these, as the pipeline does.

// testCaller is a loader call's Caller with resilience's errors and
// hooks, under r (nil: no Retry).
func testCaller(r *loadcall.Retry) *loadcall.Caller {
	return &loadcall.Caller{Retry: r, Panicked: panicError, IsPanic: isPanic, KeyErrors: keyErrors, Exited: errFlightExited}
}

func classifyLoad(err error) loadcall.Class { return loadcall.Classify(err, isPanic) }

func (p *Pipeline[V]) isLoadFailure(err error) bool { return p.lc.IsLoadFailure(err) }

func (s RetrySettings) withDefaults() RetrySettings {
	return RetrySettings(loadcall.Retry(s).WithDefaults())
}

func (s RetrySettings) validate() string { return loadcall.Retry(s).Validate() }

func (s *RetrySettings) policy() retryloop.Policy {
	r := loadcall.Retry(*s)
	return r.Policy()
}

func (s *RetrySettings) retryable(err error) bool {
	r := loadcall.Retry(*s)
	return testCaller(&r).Retryable(err)
}

func retry[V any](ctx context.Context, s *RetrySettings, failure func(error) bool, attempt func(n int) (V, error)) (V, error) {
	var r *loadcall.Retry
	if s != nil {
		rs := loadcall.Retry(*s)
		r = &rs
	}
	return loadcall.Run(ctx, testCaller(r), failure, attempt)
}
