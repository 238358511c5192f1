//go:build !race

package resilience

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/herdguard/herdguard/breaker"
)

func doWork(context.Context) (string, error) { return "ok", nil }

// TestDo_noSDK_noAllocs: with no SDK installed, a keyless call that
// succeeds, with or without a breaker, allocates nothing. (The race
// detector allocates, hence the build tag.)
func TestDo_noSDK_noAllocs(t *testing.T) {
	if otel.GetTracerProvider() != defaultGlobalTP {
		t.Skip("a global TracerProvider is installed")
	}
	for _, b := range []*Builder[string]{
		New[string]("bare").Keyless(),
		New[string]("breaker").Keyless().Breaker(breaker.Settings{}),
	} {
		p := build(t, b)
		ctx := context.Background()
		if n := testing.AllocsPerRun(1000, func() {
			if _, err := p.Do(ctx, doWork); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: Do allocates %v times per call, want 0", p.name, n)
		}
	}
}

func BenchmarkDo_breakerTimeout(b *testing.B) {
	benchDo(b, New[string]("do").Keyless().Breaker(breaker.Settings{}).Timeout(time.Second))
}

func BenchmarkDo_breaker(b *testing.B) {
	benchDo(b, New[string]("do").Keyless().Breaker(breaker.Settings{}))
}

// benchDo measures a successful Do through the pipeline bl builds.
func benchDo(b *testing.B, bl *Builder[string]) {
	p, err := bl.Build()
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Do(ctx, doWork); err != nil {
			b.Fatal(err)
		}
	}
}
