package bench

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/resilience"
)

// noop is the loader of the cold-miss benchmarks: it costs nothing, so
// what is measured is what a lock costs around a load.
func noop(_ context.Context, key string) (string, error) { return key, nil }

// redislockLoad is the usual recipe for a cold key with bsm/redislock:
// GET; on a miss, obtain the lock, GET again (another holder may have
// written it meanwhile), load, SET, release. Keys here are fresh, so the
// lock is never contended; a real caller would wait and retry on
// redislock.ErrNotObtained.
func redislockLoad(ctx context.Context, rdb *redis.Client, locker *redislock.Client, key string) (string, error) {
	v, err := rdb.Get(ctx, key).Result()
	if !errors.Is(err, redis.Nil) {
		return v, err
	}
	lk, err := locker.Obtain(ctx, "lock:"+key, 30*time.Second, nil)
	if err != nil {
		return "", err
	}
	v, err = rdb.Get(ctx, key).Result()
	switch {
	case errors.Is(err, redis.Nil):
		if v, err = noop(ctx, key); err == nil {
			err = rdb.Set(ctx, key, v, time.Hour).Err()
		}
	case err == nil:
	}
	if rerr := lk.Release(context.WithoutCancel(ctx)); err == nil {
		err = rerr
	}
	return v, err
}

// coldMisses are the contenders of a cold key loaded under a Redis lock,
// the caller being the lock's winner: each op reads a key nobody wrote.
func coldMisses(s *redistest.Server, ops func(*testing.B, *roundTrips, func(int) error)) []contender {
	ctx := context.Background()
	return []contender{
		{"pipeline", func(b *testing.B) {
			rdb, rt := counted(s)
			p, err := resilience.New[string]("cold").Cache(time.Hour).Redis(rdb).Lock(resilience.LockSettings{}).Build()
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = p.Close() })
			if r, err := p.GetResult(ctx, freshKey("cold:"), noop); err != nil || r.Source != resilience.SourceLoader {
				b.Fatalf("source %v, err %v; want a load", r.Source, err)
			}
			ops(b, rt, func(int) error {
				k := freshKey("cold:")
				v, err := p.Get(ctx, k, noop)
				if err == nil && v != k {
					err = fmt.Errorf("got %q for %s", v, k)
				}
				return err
			})
		}},
		{"redislock", func(b *testing.B) {
			rdb, rt := counted(s)
			locker := redislock.New(rdb)
			ops(b, rt, func(int) error {
				k := freshKey("rl:")
				v, err := redislockLoad(ctx, rdb, locker, k)
				if err == nil && v != k {
					err = fmt.Errorf("got %q for %s", v, k)
				}
				return err
			})
		}},
	}
}

// BenchmarkColdMissLock is a cold key loaded under the Redis lock by its
// winner, one caller at a time: the pipeline's Get beside the redislock
// recipe, with a loader that costs nothing.
func BenchmarkColdMissLock(b *testing.B) {
	runContenders(b, coldMisses(redistest.Start(b), serialOps))
}

// BenchmarkColdMissLockParallel is BenchmarkColdMissLock from
// redisParallelism goroutines per P, each on keys of its own.
func BenchmarkColdMissLockParallel(b *testing.B) {
	runContenders(b, coldMisses(redistest.Start(b), parallelOps))
}
