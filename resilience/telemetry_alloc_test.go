//go:build !race

package resilience

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
)

// TestTelemetry_L1HitNoSDK_noAllocs: with no SDK installed, telemetry costs
// an L1 hit no allocation. (The race detector allocates, hence the build
// tag.)
func TestTelemetry_L1HitNoSDK_noAllocs(t *testing.T) {
	if otel.GetTracerProvider() != defaultGlobalTP {
		t.Skip("a global TracerProvider is installed")
	}
	p := build(t, New[string]("alloc").Cache(time.Minute).SingleFlight())
	ctx := context.Background()
	telGet(t, ctx, p, "k", okLoad)
	if p.tel.Tracing() || p.tel.Metering() {
		t.Fatal("telemetry is on with no SDK installed")
	}
	if n := testing.AllocsPerRun(1000, func() {
		if _, err := p.Get(ctx, "k", okLoad); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("L1 hit: %v allocs, want 0", n)
	}
}
