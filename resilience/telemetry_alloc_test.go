//go:build !race

package resilience

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
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
	if n := testing.AllocsPerRun(1000, func() {
		if r, err := p.GetResult(ctx, "k", okLoad); err != nil || r.Source != SourceL1 {
			t.Fatal(r.Source, err)
		}
	}); n != 0 {
		t.Fatalf("L1 hit through GetResult: %v allocs, want 0", n)
	}
}

// TestTelemetry_L1HitSDK_noAllocs: with an SDK that samples nothing and
// an SDK meter (with a reader, and with none), an L1 hit starts no span
// and records its count without allocating.
func TestTelemetry_L1HitSDK_noAllocs(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	for _, reader := range []bool{true, false} {
		var opts []sdkmetric.Option
		if reader {
			opts = append(opts, sdkmetric.WithReader(sdkmetric.NewManualReader()))
		}
		mp := sdkmetric.NewMeterProvider(opts...)
		t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
		p := build(t, New[string]("alloc").Cache(time.Minute).SingleFlight().TracerProvider(tp).MeterProvider(mp))
		ctx := context.Background()
		telGet(t, ctx, p, "k", okLoad)
		if n := testing.AllocsPerRun(1000, func() {
			if _, err := p.Get(ctx, "k", okLoad); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Fatalf("L1 hit, meter with a reader %v: %v allocs, want 0", reader, n)
		}
	}
}
