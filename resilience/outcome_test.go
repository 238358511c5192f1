package resilience

import (
	"context"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
)

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
