package bench

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/maypok86/otter/v2"
	"github.com/viccon/sturdyc"

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

// sturdycShards is the number of shards of every sturdyc client here.
const sturdycShards = 64

// newSturdyc returns a sturdyc client without its background eviction
// goroutine, which would outlive the benchmark.
func newSturdyc[V any](capacity int) *sturdyc.Client[V] {
	return sturdyc.New[V](capacity, sturdycShards, time.Hour, 10, sturdyc.WithNoContinuousEvictions())
}

func warmSturdyc(b *testing.B) *sturdyc.Client[int] {
	c := newSturdyc[int](10_000)
	for _, k := range keyNames() {
		c.Set(k, len(k))
	}
	return c
}

// BenchmarkL1Hit is a cache hit through the whole pipeline (argument checks,
// telemetry check, in-process cache), through GetResult too, beside
// otter's bare GetIfPresent and sturdyc's Get. Each loop is written out,
// not passed as a function, so that no contender pays an indirect call.
func BenchmarkL1Hit(b *testing.B) {
	ks := keyNames()
	ctx := context.Background()
	runContenders(b, []contender{
		{"pipeline", func(b *testing.B) {
			p := warmPipeline(b)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := p.Get(ctx, ks[i&(keys-1)], load); err != nil {
					b.Fatal(err)
				}
				i++
			}
		}},
		{"pipeline.GetResult", func(b *testing.B) {
			p := warmPipeline(b)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if r, err := p.GetResult(ctx, ks[i&(keys-1)], load); err != nil || r.Source != resilience.SourceL1 {
					b.Fatalf("source %v, err %v; want an L1 hit", r.Source, err)
				}
				i++
			}
		}},
		{"otter.GetIfPresent", func(b *testing.B) {
			c := warmOtter(b)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, ok := c.GetIfPresent(ks[i&(keys-1)]); !ok {
					b.Fatal("miss")
				}
				i++
			}
		}},
		{"sturdyc.Get", func(b *testing.B) {
			c := warmSturdyc(b)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, ok := c.Get(ks[i&(keys-1)]); !ok {
					b.Fatal("miss")
				}
				i++
			}
		}},
	})
}

// BenchmarkL1HitParallel is BenchmarkL1Hit from every P at once. A worker
// that fails reports with Error and stops: FailNow must not run on a
// worker goroutine. Its loops are written out for the same reason as
// BenchmarkL1Hit's.
func BenchmarkL1HitParallel(b *testing.B) {
	ks := keyNames()
	ctx := context.Background()
	runContenders(b, []contender{
		{"pipeline", func(b *testing.B) {
			p := warmPipeline(b)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if _, err := p.Get(ctx, ks[i&(keys-1)], load); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
		}},
		{"pipeline.GetResult", func(b *testing.B) {
			p := warmPipeline(b)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if r, err := p.GetResult(ctx, ks[i&(keys-1)], load); err != nil || r.Source != resilience.SourceL1 {
						b.Errorf("source %v, err %v; want an L1 hit", r.Source, err)
						return
					}
					i++
				}
			})
		}},
		{"otter.GetIfPresent", func(b *testing.B) {
			c := warmOtter(b)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if _, ok := c.GetIfPresent(ks[i&(keys-1)]); !ok {
						b.Error("miss")
						return
					}
					i++
				}
			})
		}},
		{"sturdyc.Get", func(b *testing.B) {
			c := warmSturdyc(b)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if _, ok := c.Get(ks[i&(keys-1)]); !ok {
						b.Error("miss")
						return
					}
					i++
				}
			})
		}},
	})
}
