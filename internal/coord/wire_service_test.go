package coord

import (
	"errors"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
)

// TestWire_defaults: Wire gives a backend the backend's operation timeout
// and a breaker of its own named after BreakerName; with a shared
// breaker, that one; and a breaker setting refused names BreakerField.
func TestWire_defaults(t *testing.T) {
	d := Defaults{Prefix: "p:", RedisTimeout: time.Millisecond, BackendTimeout: 3 * time.Second, OpenTimeout: time.Second, FailureRatio: 0.5}
	o := Options{Namespace: "wired", Hooks: newHeard().hooks(), Defaults: d, BreakerName: "backend", BreakerField: "BackendOptions"}
	var b views
	o.Backend = &b
	w, err := Wire(o, Deps[string]{})
	if err != nil {
		t.Fatal(err)
	}
	closeAll(t, w)
	if w.Guard.OpTimeout != 3*time.Second || w.Guard.Breaker.Name() != "backend" {
		t.Fatalf("OpTimeout %v, breaker %q; want 3s and \"backend\"", w.Guard.OpTimeout, w.Guard.Breaker.Name())
	}
	shared := newBreaker(t, "shared")
	o.Breaker = shared
	if w, err = Wire(o, Deps[string]{}); err != nil || w.Guard.Breaker != shared {
		t.Fatalf("Wire with a shared breaker: %v; want that breaker", err)
	}
	closeAll(t, w)
	o.Breaker, o.BreakerSettings = nil, breaker.Settings{FailureRatio: 2}
	var se *SettingError
	if _, err := Wire(o, Deps[string]{}); !errors.As(err, &se) || se.Field != "BackendOptions" {
		t.Fatalf("Wire with a ratio of 2: %v; want a *SettingError of BackendOptions", err)
	}
}
