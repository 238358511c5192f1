package resilience

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/internal/loadcall"
)

// TestClassifyLoad: each kind of loader error, its class, and what the
// stages after the loader make of it: the fallback reason, the loads
// metric's outcome, whether it may be retried, and whether it is a
// failure with and without an IsFailure that calls nothing a failure.
func TestClassifyLoad(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name      string
		err       error
		class     loadcall.Class
		reason    string
		outcome   string
		retryable bool
		failure   bool // without IsFailure
		failureIf bool // with an IsFailure that returns false
	}{
		{"nil", nil, loadcall.OK, "", "ok", false, false, false},
		{"not found", fmt.Errorf("x: %w", ErrNotFound), loadcall.NotFound, "error", "not_found", false, false, false},
		{"canceled", fmt.Errorf("x: %w", context.Canceled), loadcall.Canceled, "error", "error", false, false, false},
		{"breaker open", fmt.Errorf("x: %w", breaker.ErrOpen), loadcall.Refused, "breaker_open", "breaker_open", false, true, true},
		{"too many probes", breaker.ErrTooManyProbes, loadcall.Refused, "breaker_open", "breaker_open", false, true, true},
		{"attempt timeout", timedOut("loader attempt", time.Second, context.DeadlineExceeded), loadcall.TimedOut, "timeout", "timeout", true, true, true},
		{"caller's deadline", context.DeadlineExceeded, loadcall.Deadline, "timeout", "timeout", false, true, false},
		{"panic", panicked("loader", "oops"), loadcall.Panicked, "panic", "panic", true, true, true},
		{"other", boom, loadcall.Failed, "error", "error", true, true, false},
	}
	plain := &Pipeline[string]{lc: *testCaller(nil)}
	picky := &Pipeline[string]{lc: *testCaller(nil)}
	picky.lc.IsFailure = func(error) bool { return false }
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := classifyLoad(tc.err)
			if c != tc.class {
				t.Fatalf("class %d, want %d", c, tc.class)
			}
			if got := reason(tc.err); got != tc.reason {
				t.Errorf("reason %q, want %q", got, tc.reason)
			}
			if got := c.Outcome(); got != tc.outcome {
				t.Errorf("outcome %q, want %q", got, tc.outcome)
			}
			if got := (&RetrySettings{}).retryable(tc.err); got != tc.retryable {
				t.Errorf("retryable %v, want %v", got, tc.retryable)
			}
			if got := plain.isLoadFailure(tc.err); got != tc.failure {
				t.Errorf("failure without IsFailure %v, want %v", got, tc.failure)
			}
			if got := picky.isLoadFailure(tc.err); got != tc.failureIf {
				t.Errorf("failure with IsFailure %v, want %v", got, tc.failureIf)
			}
		})
	}
}

// TestIsFailure_doesNotExcuseTimeoutsOrPanics: an IsFailure that calls no
// error a failure decides for the loader's own errors only: an attempt
// that ran out of its timeout, and a loader that panicked, are failures
// still, answered by the default and counted by the loader's breaker.
func TestIsFailure_doesNotExcuseTimeoutsOrPanics(t *testing.T) {
	const name = "excuses"
	p := build(t, New[string](name).Cache(time.Minute).
		Timeout(20*time.Millisecond).
		Breaker(breaker.Settings{Failures: 2, OpenTimeout: time.Hour}).
		DefaultValue("default").
		IsFailure(func(error) bool { return false }))
	ctx := context.Background()
	loads := map[string]LoadFunc[string]{
		"timeout": func(ctx context.Context, _ string) (string, error) {
			<-ctx.Done() // the attempt's timeout
			return "", ctx.Err()
		},
		"panic": func(context.Context, string) (string, error) { panic("oops") },
	}
	for _, k := range []string{"timeout", "panic"} {
		r, err := p.GetResult(ctx, k, loads[k])
		if err != nil || r.Source != SourceDefault || reason(r.Cause) != k {
			t.Fatalf("%s: %+v %v; want the default, for a %s", k, r, err, k)
		}
	}
	if got := p.Health().Breakers[name]; got != breaker.Open {
		t.Fatalf("breaker %v after a timeout and a panic, want open: both are failures", got)
	}
}
