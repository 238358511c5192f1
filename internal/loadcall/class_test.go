package loadcall

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/cache"
)

// TestClassify: each kind of loader error, its class, and what the
// stages after the loader make of it: the fallback reason, the loads
// metric's outcome, whether it may be retried, and whether it is a
// failure with and without an IsFailure that calls nothing a failure.
func TestClassify(t *testing.T) {
	cases := []struct {
		name      string
		err       error
		class     Class
		reason    string
		outcome   string
		retryable bool
		failure   bool // without IsFailure
		failureIf bool // with an IsFailure that returns false
	}{
		{"nil", nil, OK, "", "ok", false, false, false},
		{"not found", fmt.Errorf("x: %w", cache.ErrNotFound), NotFound, "error", "not_found", false, false, false},
		{"canceled", fmt.Errorf("x: %w", context.Canceled), Canceled, "error", "error", false, false, false},
		{"breaker open", fmt.Errorf("x: %w", breaker.ErrOpen), Refused, "breaker_open", "breaker_open", false, true, true},
		{"too many probes", breaker.ErrTooManyProbes, Refused, "breaker_open", "breaker_open", false, true, true},
		{"attempt timeout", timedOut(time.Second, context.DeadlineExceeded), TimedOut, "timeout", "timeout", true, true, true},
		{"caller's deadline", context.DeadlineExceeded, Deadline, "timeout", "timeout", false, true, false},
		{"panic", panicked("loader", "oops"), Panicked, "panic", "panic", true, true, true},
		{"other", errBoom, Failed, "error", "error", true, true, false},
	}
	plain := newCaller(t, &Retry{})
	picky := newCaller(t, &Retry{})
	picky.IsFailure = func(error) bool { return false }
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Classify(tc.err, isPanic)
			if c != tc.class {
				t.Fatalf("class %d, want %d", c, tc.class)
			}
			if got := c.Reason(); got != tc.reason {
				t.Errorf("reason %q, want %q", got, tc.reason)
			}
			if got := c.Outcome(); got != tc.outcome {
				t.Errorf("outcome %q, want %q", got, tc.outcome)
			}
			if got := plain.Retryable(tc.err); got != tc.retryable {
				t.Errorf("retryable %v, want %v", got, tc.retryable)
			}
			if got := plain.IsLoadFailure(tc.err); got != tc.failure {
				t.Errorf("failure without IsFailure %v, want %v", got, tc.failure)
			}
			if got := picky.IsLoadFailure(tc.err); got != tc.failureIf {
				t.Errorf("failure with IsFailure %v, want %v", got, tc.failureIf)
			}
		})
	}
}

// TestClassify_panicIsTheCallersTest: a panic is whatever isPanic says
// is one, and nothing else.
func TestClassify_panicIsTheCallersTest(t *testing.T) {
	if got := Classify(errBoom, func(err error) bool { return err == errBoom }); got != Panicked {
		t.Errorf("class %d of an error isPanic accepts, want Panicked", got)
	}
	if got := Classify(panicked("loader", "oops"), func(error) bool { return false }); got != Failed {
		t.Errorf("class %d of an error isPanic refuses, want Failed", got)
	}
}

// TestCaller_IsLoadFailure_hook: IsFailure decides for the errors that are
// not always failures, and a panic in it counts the error as a failure.
func TestCaller_IsLoadFailure_hook(t *testing.T) {
	errAnswer := errors.New("no such user")
	c := newCaller(t, nil)
	c.IsFailure = func(err error) bool { return !errors.Is(err, errAnswer) }
	if c.IsLoadFailure(errAnswer) || !c.IsLoadFailure(errBoom) {
		t.Errorf("IsLoadFailure(answer) = %v, IsLoadFailure(boom) = %v; want false, true", c.IsLoadFailure(errAnswer), c.IsLoadFailure(errBoom))
	}
	c.IsFailure = func(error) bool { panic("hook boom") }
	if !c.IsLoadFailure(errBoom) {
		t.Error("an IsFailure that panics excused the error; want it a failure")
	}
}
