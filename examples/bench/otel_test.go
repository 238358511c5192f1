package bench

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/resilience"
)

// discard is a SpanExporter that drops every span: the benchmarks measure
// what the SDK costs the caller, not an exporter's I/O.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// sampledTP records every span and hands it to a simple (synchronous)
// processor with the discarding exporter.
func sampledTP(b *testing.B) *sdktrace.TracerProvider {
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(discard{})),
	)
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

func otelPipeline(b *testing.B, tp trace.TracerProvider) *resilience.Pipeline[int] {
	bld := resilience.New[int]("bench").Cache(time.Hour).SingleFlight()
	if tp != nil {
		bld = bld.TracerProvider(tp)
	}
	p, err := bld.Build()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close() })
	return p
}

// BenchmarkOTel is the cost of tracing, in one run: one bare SDK span
// (Start and End, sampled, exported to nowhere) beside an L1 hit (2 spans:
// get, l1) and a full load (4 spans: get, l1, singleflight, load), each
// with no SDK and with the SDK sampling every span.
//
//	cd examples && go test -run '^$' -bench OTel -benchmem -count 5 ./bench
func BenchmarkOTel(b *testing.B) {
	ctx := context.Background()
	b.Run("sdk-span", func(b *testing.B) {
		tr := sampledTP(b).Tracer("bench")
		b.ReportAllocs()
		for b.Loop() {
			_, sp := tr.Start(ctx, "span")
			sp.End()
		}
	})
	for _, withSDK := range []bool{false, true} {
		name := "no-sdk"
		if withSDK {
			name = "sdk"
		}
		newTP := func(b *testing.B) trace.TracerProvider {
			if withSDK {
				return sampledTP(b)
			}
			return nil // the global provider, with no SDK installed
		}
		b.Run("l1-hit/"+name, func(b *testing.B) {
			p := otelPipeline(b, newTP(b))
			if _, err := p.Get(ctx, "user:1", load); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Get(ctx, "user:1", load); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("load/"+name, func(b *testing.B) {
			p := otelPipeline(b, newTP(b))
			b.ReportAllocs()
			for b.Loop() {
				if err := p.Invalidate(ctx, "user:1"); err != nil {
					b.Fatal(err)
				}
				r, err := p.GetResult(ctx, "user:1", load)
				if err != nil || r.Source != resilience.SourceLoader {
					b.Fatalf("source %v, err %v; want a load", r.Source, err)
				}
			}
		})
	}
}

// TestL1HitNoSDK_noAllocs holds the promise the benchmark shows: with no
// SDK installed, an L1 hit allocates nothing.
func TestL1HitNoSDK_noAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	p, err := resilience.New[int]("bench").Cache(time.Hour).SingleFlight().Build()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	if _, err := p.Get(ctx, "user:1", load); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(1000, func() { _, _ = p.Get(ctx, "user:1", load) }); n != 0 {
		t.Fatalf("L1 hit with no SDK: %v allocs, want 0", n)
	}
}
