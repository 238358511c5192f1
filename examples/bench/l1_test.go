package bench

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/maypok86/otter/v2"

	"github.com/herdguard/herdguard/resilience"
)

const keys = 1024

func keyNames() []string {
	k := make([]string, keys)
	for i := range k {
		k[i] = "user:" + strconv.Itoa(i)
	}
	return k
}

func load(_ context.Context, key string) (int, error) { return len(key), nil }

func warmPipeline(b *testing.B) *resilience.Pipeline[int] {
	p, err := resilience.New[int]("bench").Cache(time.Hour).SingleFlight().Build()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close() })
	for _, k := range keyNames() {
		if _, err := p.Get(context.Background(), k, load); err != nil {
			b.Fatal(err)
		}
	}
	return p
}

func warmOtter(b *testing.B) *otter.Cache[string, int] {
	c := otter.Must(&otter.Options[string, int]{MaximumSize: 10_000, ExpiryCalculator: otter.ExpiryWriting[string, int](time.Hour)})
	for _, k := range keyNames() {
		c.Set(k, len(k))
	}
	return c
}

// BenchmarkL1Hit is a cache hit through the whole pipeline (argument checks,
// telemetry check, in-process cache), beside otter's bare GetIfPresent.
func BenchmarkL1Hit(b *testing.B) {
	ks := keyNames()
	ctx := context.Background()
	b.Run("pipeline", func(b *testing.B) {
		p := warmPipeline(b)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := p.Get(ctx, ks[i&(keys-1)], load); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("otter.GetIfPresent", func(b *testing.B) {
		c := warmOtter(b)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, ok := c.GetIfPresent(ks[i&(keys-1)]); !ok {
				b.Fatal("miss")
			}
			i++
		}
	})
}

// BenchmarkL1HitParallel is BenchmarkL1Hit from every P at once.
func BenchmarkL1HitParallel(b *testing.B) {
	ks := keyNames()
	ctx := context.Background()
	b.Run("pipeline", func(b *testing.B) {
		p := warmPipeline(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if _, err := p.Get(ctx, ks[i&(keys-1)], load); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	})
	b.Run("otter.GetIfPresent", func(b *testing.B) {
		c := warmOtter(b)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if _, ok := c.GetIfPresent(ks[i&(keys-1)]); !ok {
					b.Fatal("miss")
				}
				i++
			}
		})
	})
}
