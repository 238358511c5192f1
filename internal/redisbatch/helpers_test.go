package redisbatch

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// within waits until cond holds, at most bound, and returns how long that
// took.
func within(t *testing.T, bound time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > bound {
			t.Fatalf("%s: not within %v", what, bound)
		}
		time.Sleep(time.Millisecond)
	}
	return time.Since(start)
}

// waitFor is within with a bound of 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	within(t, 5*time.Second, "condition", cond)
}
