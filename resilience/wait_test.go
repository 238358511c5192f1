package resilience

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/herdguard/herdguard/cache"
)

// within polls cond until it holds, or fails the test after bound, and
// returns how long it took. cond must be the event the test waits for,
// not a stand-in for the time it should take. In a testing/synctest
// bubble each poll moves the bubble's clock on by a millisecond, so a
// condition that time makes true (an entry gone stale, a breaker gone
// half-open) holds at the first poll past that time.
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

// untilL1Stale waits until p's L1 no longer holds key fresh: past its L1
// TTL, measured by the cache's own clock.
func untilL1Stale[V any](t *testing.T, p *Pipeline[V], key string) {
	t.Helper()
	within(t, 5*time.Second, "L1 copy of "+key+" no longer fresh", func() bool {
		_, f := p.l1.Find(key)
		return f != cache.Fresh
	})
}

// blockedIn returns how many goroutines are blocked (not running, nor
// ready to run) with fn, a function as a goroutine dump names it, on their
// stack.
func blockedIn(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	blocked := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, stack, _ := strings.Cut(g, "\n")
		state := header[strings.Index(header, "[")+1:]
		if strings.HasPrefix(state, "running") || strings.HasPrefix(state, "runnable") || strings.HasPrefix(state, "syscall") {
			continue
		}
		if strings.Contains(stack, fn) {
			blocked++
		}
	}
	return blocked
}
