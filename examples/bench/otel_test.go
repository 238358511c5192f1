package bench

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/resilience"
)

// discard is a SpanExporter that drops every span: the benchmarks measure
// what the SDK costs the caller, not an exporter's I/O.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// newTP returns an SDK TracerProvider with sampler s, handing what it
// records to a simple (synchronous) processor with the discarding
// exporter.
func newTP(b *testing.B, s sdktrace.Sampler) *sdktrace.TracerProvider {
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(s),
		sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(discard{})),
	)
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

func sampledTP(b *testing.B) *sdktrace.TracerProvider { return newTP(b, sdktrace.AlwaysSample()) }

// newMP returns an SDK MeterProvider, with a manual reader (collected by
// nobody: it keeps the aggregates) or with no reader.
func newMP(b *testing.B, reader bool) *sdkmetric.MeterProvider {
	var opts []sdkmetric.Option
	if reader {
		opts = append(opts, sdkmetric.WithReader(sdkmetric.NewManualReader()))
	}
	mp := sdkmetric.NewMeterProvider(opts...)
	b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return mp
}

// otelPipeline builds the benchmarks' pipeline with tp and mp (nil: the
// global providers, with no SDK installed).
func otelPipeline(b *testing.B, tp trace.TracerProvider, mp *sdkmetric.MeterProvider) *resilience.Pipeline[int] {
	bld := resilience.New[int]("bench").Cache(time.Hour).SingleFlight()
	if tp != nil {
		bld = bld.TracerProvider(tp)
	}
	if mp != nil {
		bld = bld.MeterProvider(mp)
	}
	p, err := bld.Build()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close() })
	return p
}

// hitLoop runs L1 hits of p under ctx.
func hitLoop(b *testing.B, ctx context.Context, p *resilience.Pipeline[int]) {
	if _, err := p.Get(ctx, "user:1", load); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Get(ctx, "user:1", load); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOTel is the cost of telemetry, in one run. OTel/l1-hit is an
// L1 hit with no SDK installed ("no-sdk"), beside the same hit with an SDK
// TracerProvider that samples nothing, then with an SDK MeterProvider
// added (no reader, then a reader), then under a sampled parent span (the
// hit records its two spans, get and l1), and beside one bare SDK span,
// Start and End, sampled and exported to nowhere ("sdk-span"). OTel/load
// is a load (a miss, the loader, the write, and an Invalidate to make the
// next one a miss), with no SDK and with an SDK sampling its four spans.
// benchcmp's ratios of the "pipeline.*" contenders over "no-sdk" are each
// one's cost over the untraced call.
//
//	cd examples && go run ./benchcmp -rounds 3 -bench '^BenchmarkOTel$'
func BenchmarkOTel(b *testing.B) {
	b.Run("l1-hit", func(b *testing.B) {
		ctx := context.Background()
		runContenders(b, []contender{
			{"no-sdk", func(b *testing.B) { hitLoop(b, ctx, otelPipeline(b, nil, nil)) }},
			{"pipeline.sdk-sample-none", func(b *testing.B) {
				hitLoop(b, ctx, otelPipeline(b, newTP(b, sdktrace.NeverSample()), nil))
			}},
			{"pipeline.sdk-meter-no-reader", func(b *testing.B) {
				hitLoop(b, ctx, otelPipeline(b, newTP(b, sdktrace.NeverSample()), newMP(b, false)))
			}},
			{"pipeline.sdk-metrics", func(b *testing.B) {
				hitLoop(b, ctx, otelPipeline(b, newTP(b, sdktrace.NeverSample()), newMP(b, true)))
			}},
			{"pipeline.sdk-sampled-parent", func(b *testing.B) {
				tp := sampledTP(b)
				pctx, parent := tp.Tracer("bench").Start(ctx, "parent")
				defer parent.End()
				hitLoop(b, pctx, otelPipeline(b, tp, newMP(b, true)))
			}},
			{"sdk-span", func(b *testing.B) {
				tr := sampledTP(b).Tracer("bench")
				b.ReportAllocs()
				for b.Loop() {
					_, sp := tr.Start(ctx, "span")
					sp.End()
				}
			}},
		})
	})
	b.Run("load", func(b *testing.B) {
		ctx := context.Background()
		loadLoop := func(b *testing.B, p *resilience.Pipeline[int]) {
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
		}
		runContenders(b, []contender{
			{"no-sdk", func(b *testing.B) { loadLoop(b, otelPipeline(b, nil, nil)) }},
			{"pipeline.sdk", func(b *testing.B) { loadLoop(b, otelPipeline(b, sampledTP(b), newMP(b, true))) }},
		})
	})
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
	if n := testing.AllocsPerRun(1000, func() { _, _ = p.GetResult(ctx, "user:1", load) }); n != 0 {
		t.Fatalf("GetResult L1 hit with no SDK: %v allocs, want 0", n)
	}
}
