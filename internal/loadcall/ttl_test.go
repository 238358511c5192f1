package loadcall

import (
	"context"
	"testing"
	"time"
)

func TestSetTTL(t *testing.T) {
	ctx, h := WithTTL(context.Background())
	if got := h.Get(); got != 0 {
		t.Fatalf("Get() = %v before SetTTL, want 0", got)
	}
	if !SetTTL(ctx, time.Minute) || h.Get() != time.Minute {
		t.Fatalf("SetTTL(1m) then Get() = %v, want 1m", h.Get())
	}
	// A context derived from the loader's carries the same place.
	sub, cancel := context.WithCancel(ctx)
	defer cancel()
	if !SetTTL(sub, time.Hour) || h.Get() != time.Hour {
		t.Fatalf("SetTTL(1h) on a derived context then Get() = %v, want 1h", h.Get())
	}
}

func TestSetTTL_notALoadersContext(t *testing.T) {
	if SetTTL(context.Background(), time.Minute) {
		t.Error("SetTTL on a context without WithTTL reported true")
	}
	var ctx context.Context // a nil context, as a careless caller may pass
	if SetTTL(ctx, time.Minute) {
		t.Error("SetTTL on a nil context reported true")
	}
}

func TestStamp(t *testing.T) {
	l := Lifetimes{TTL: time.Hour, Grace: time.Minute, NegativeTTL: 10 * time.Second}
	cases := []struct {
		name       string
		notFound   bool
		set        time.Duration
		fresh, all time.Duration
	}{
		{"a value", false, 0, time.Hour, time.Hour + time.Minute},
		{"a value with a shorter TTL of its loader's", false, 5 * time.Minute, 5 * time.Minute, 6 * time.Minute},
		{"a value with a longer one", false, 2 * time.Hour, time.Hour, time.Hour + time.Minute},
		{"a not-found, with no grace", true, 0, 10 * time.Second, 10 * time.Second},
		{"a not-found keeps NegativeTTL", true, 5 * time.Minute, 10 * time.Second, 10 * time.Second},
	}
	for _, tc := range cases {
		e := Stamp(l, 7, tc.notFound, time.Millisecond, 3, tc.set)
		if got, all := e.Expires.Sub(e.Written), e.StaleUntil.Sub(e.Written); got != tc.fresh || all != tc.all {
			t.Errorf("%s: fresh %v, stale until %v after writing; want %v, %v", tc.name, got, all, tc.fresh, tc.all)
		}
		if e.Value != 7 || e.NotFound != tc.notFound || e.LoadDuration != time.Millisecond || e.Fence != 3 {
			t.Errorf("%s: entry %+v", tc.name, e)
		}
	}
}

func TestStamp_jitterShortensTheTTL(t *testing.T) {
	l := Lifetimes{TTL: time.Hour, Grace: time.Minute, Jitter: 0.5}
	for range 100 {
		e := Stamp(l, 0, false, 0, 0, 0)
		fresh := e.Expires.Sub(e.Written)
		if fresh < 30*time.Minute || fresh > time.Hour || e.StaleUntil.Sub(e.Expires) != time.Minute {
			t.Fatalf("fresh %v, grace %v; want within [30m, 1h], 1m", fresh, e.StaleUntil.Sub(e.Expires))
		}
	}
}
