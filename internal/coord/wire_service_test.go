package coord

import (
	"errors"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/internal/redistest"
)

// TestWire_defaults: Wire gives Redis and a backend each its operation
// timeout and a breaker of its own, named "redis" or "backend"; with a
// shared breaker, that one; and a breaker setting refused names the
// Builder's field of the service's options.
func TestWire_defaults(t *testing.T) {
	srv := redistest.Start(t)
	var b views
	for _, tc := range []struct {
		o       Options
		timeout time.Duration
		name    string
		field   string
	}{
		{Options{Backend: &b}, DefaultBackendTimeout, "backend", "BackendOptions"},
		{Options{Client: srv.Client()}, DefaultRedisTimeout, "redis", "RedisOptions"},
	} {
		o := tc.o
		o.Namespace, o.Hooks = "wired", newHeard().hooks()
		w, err := Wire(o, Deps[string]{})
		if err != nil {
			t.Fatal(err)
		}
		closeAll(t, w)
		if w.Guard.OpTimeout != tc.timeout || w.Guard.Breaker.Name() != tc.name {
			t.Fatalf("OpTimeout %v, breaker %q; want %v and %q", w.Guard.OpTimeout, w.Guard.Breaker.Name(), tc.timeout, tc.name)
		}
		shared := newBreaker(t, "shared")
		o.Breaker = shared
		if w, err = Wire(o, Deps[string]{}); err != nil || w.Guard.Breaker != shared {
			t.Fatalf("%s: Wire with a shared breaker: %v; want that breaker", tc.name, err)
		}
		closeAll(t, w)
		o.Breaker, o.BreakerSettings = nil, breaker.Settings{FailureRatio: 2}
		var se *SettingError
		if _, err := Wire(o, Deps[string]{}); !errors.As(err, &se) || se.Field != tc.field {
			t.Fatalf("%s: Wire with a ratio of 2: %v; want a *SettingError of %s", tc.name, err, tc.field)
		}
	}
}
