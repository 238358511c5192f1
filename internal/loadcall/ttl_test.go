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
