package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	rediscache "github.com/go-redis/cache/v9"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/keyring"
	"github.com/herdguard/herdguard/resilience"
)

func l2Value(key string) string { return "value-of-" + key }

func loadL2(_ context.Context, key string) (string, error) { return l2Value(key), nil }

// l2Pipeline returns a pipeline whose every call misses L1 (an L1TTL of a
// nanosecond) and finds its value in Redis, with keyNames already written
// there. build adds the stages under test.
func l2Pipeline(b *testing.B, s *redistest.Server, name string, build func(*resilience.Builder[string]) *resilience.Builder[string]) (*resilience.Pipeline[string], *roundTrips) {
	rdb, rt := counted(s)
	p, err := build(resilience.New[string](name).Cache(time.Hour).L1TTL(time.Nanosecond).Redis(rdb)).Build()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close() })
	ctx := context.Background()
	for _, k := range keyNames() {
		if _, err := p.Get(ctx, k, loadL2); err != nil {
			b.Fatal(err)
		}
	}
	if r, err := p.GetResult(ctx, "user:1", loadL2); err != nil || r.Source != resilience.SourceL2 {
		b.Fatalf("source %v, err %v; want an L2 hit", r.Source, err)
	}
	return p, rt
}

// l2PipelineNoCopy returns a pipeline with Lock that holds no L1 copy of
// the key a call reads, as a pod that has just started beside others:
// its L1 holds one entry while the calls read keyNames in turn, and the
// values were written to Redis by another pipeline of the same name.
func l2PipelineNoCopy(b *testing.B, s *redistest.Server) (*resilience.Pipeline[string], *roundTrips) {
	l2Pipeline(b, s, "l2fresh", func(bl *resilience.Builder[string]) *resilience.Builder[string] {
		return bl.Lock(resilience.LockSettings{})
	})
	rdb, rt := counted(s)
	p, err := resilience.New[string]("l2fresh").Cache(time.Hour).MaxEntries(1).Redis(rdb).Lock(resilience.LockSettings{}).Build()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close() })
	return p, rt
}

// l2Hits are the contenders of an L1 miss that Redis answers, each with
// the keys of keyNames warm in Redis: the pipeline (Get), with and without
// Lock (which adds the single-flight and the lock's subscription) and
// with Encrypt (AES-256-GCM on every value read), with Lock on a pipeline
// that holds no L1 copy (l2PipelineNoCopy: every call's look is its first
// of the key),
// go-redis/cache's Get with its local cache off, and a bare GET. ops is
// serialOps or parallelOps.
func l2Hits(s *redistest.Server, ops func(*testing.B, *roundTrips, func(int) error)) []contender {
	ks := keyNames()
	ctx := context.Background()
	pipeline := func(name string, build func(*resilience.Builder[string]) *resilience.Builder[string]) func(*testing.B) {
		return func(b *testing.B) {
			p, rt := l2Pipeline(b, s, name, build)
			ops(b, rt, func(i int) error {
				_, err := p.Get(ctx, ks[i&(keys-1)], loadL2)
				return err
			})
		}
	}
	return []contender{
		{"pipeline", pipeline("l2", func(bl *resilience.Builder[string]) *resilience.Builder[string] { return bl })},
		{"pipeline+Lock", pipeline("l2lock", func(bl *resilience.Builder[string]) *resilience.Builder[string] {
			return bl.Lock(resilience.LockSettings{})
		})},
		{"pipeline+Lock+noL1copy", func(b *testing.B) {
			p, rt := l2PipelineNoCopy(b, s)
			ops(b, rt, func(i int) error {
				k := ks[i&(keys-1)]
				v, err := p.Get(ctx, k, loadL2)
				if err != nil {
					return err
				}
				return expect(v, k)
			})
		}},
		{"pipeline+Encrypt", pipeline("l2sealed", func(bl *resilience.Builder[string]) *resilience.Builder[string] {
			ring, err := keyring.New(keyring.Key{ID: 1, Secret: []byte("an AES-256 key of 32 bytes......")})
			if err != nil {
				panic(err)
			}
			return bl.RedisOptions(resilience.RedisOptions{Encrypt: ring})
		})},
		{"go-redis-cache.Get", func(b *testing.B) {
			rdb, rt := counted(s)
			c := rediscache.New(&rediscache.Options{Redis: rdb})
			for _, k := range ks {
				if err := c.Set(&rediscache.Item{Ctx: ctx, Key: "gc:" + k, Value: l2Value(k), TTL: time.Hour}); err != nil {
					b.Fatal(err)
				}
			}
			ops(b, rt, func(i int) error {
				var v string
				k := ks[i&(keys-1)]
				if err := c.Get(ctx, "gc:"+k, &v); err != nil {
					return err
				}
				return expect(v, k)
			})
		}},
		{"go-redis.Get", func(b *testing.B) {
			rdb, rt := counted(s)
			for _, k := range ks {
				if err := rdb.Set(ctx, "raw:"+k, l2Value(k), time.Hour).Err(); err != nil {
					b.Fatal(err)
				}
			}
			ops(b, rt, func(i int) error {
				k := ks[i&(keys-1)]
				v, err := rdb.Get(ctx, "raw:"+k).Result()
				if err != nil {
					return err
				}
				return expect(v, k)
			})
		}},
	}
}

func expect(v, key string) error {
	if v != l2Value(key) {
		return fmt.Errorf("got %q for %s", v, key)
	}
	return nil
}

// BenchmarkL2Hit is an L1 miss that Redis answers, one caller at a time.
func BenchmarkL2Hit(b *testing.B) {
	runContenders(b, l2Hits(redistest.Start(b), serialOps))
}

// BenchmarkL2HitParallel is BenchmarkL2Hit from redisParallelism
// goroutines per P.
func BenchmarkL2HitParallel(b *testing.B) {
	runContenders(b, l2Hits(redistest.Start(b), parallelOps))
}
