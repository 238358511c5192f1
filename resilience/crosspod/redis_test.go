package crosspod_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/lock"
)

// adminOpts makes a client for the test's own Redis commands: no retries,
// short timeouts, so that a fault shows as an error at once.
func adminOpts(o *redis.Options) {
	o.MaxRetries = -1
	o.DialTimeout = time.Second
	o.ReadTimeout = 2 * time.Second
	o.WriteTimeout = 2 * time.Second
}

// newName returns a fresh pipeline name: a Redis namespace of its own.
func newName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// startRedis starts a private redis-server for one test, and an admin
// client of it.
func startRedis(t *testing.T) (*redistest.Server, *redis.Client) {
	t.Helper()
	s := redistest.Start(t)
	return s, s.Client(adminOpts)
}

// waitSubscribed waits until n announcement subscriptions of the fleet's
// namespace are live on the server c talks to, so that no pod misses an
// announcement for want of a subscription.
func (f *fleet) waitSubscribed(ctx context.Context, c redis.UniversalClient, n int) {
	f.t.Helper()
	ch := f.keys().Channel()
	var last error
	for ctx.Err() == nil {
		var got atomic.Int64
		var err error
		if cc, ok := c.(*redis.ClusterClient); ok {
			// Each shard counts its own subscribers; ForEachShard asks
			// them in parallel.
			err = cc.ForEachShard(ctx, func(ctx context.Context, s *redis.Client) error {
				m, err := s.PubSubNumSub(ctx, ch).Result()
				got.Add(m[ch])
				return err
			})
		} else {
			var m map[string]int64
			m, err = c.PubSubNumSub(ctx, ch).Result()
			got.Store(m[ch])
		}
		if err == nil && got.Load() >= int64(n) {
			return
		}
		last = err
		sleepCtx(ctx, 20*time.Millisecond)
	}
	f.t.Fatalf("%d announcement subscriptions not live: %v (%v)", n, ctx.Err(), last)
}

// l2Reader is what l2Value needs of a client.
type l2Reader = rcache.RedisClient

// l2Value reads key's value from the Redis cache as the pipelines wrote
// it; ok is false on a miss.
func l2Value(ctx context.Context, c l2Reader, name, key string) (v string, ok bool, err error) {
	r, err := rcache.NewRedis[string](c, rcache.RedisOptions{Namespace: name})
	if err != nil {
		return "", false, err
	}
	e, fr, err := r.Get(ctx, key)
	if err != nil || fr == cache.Miss {
		return "", false, err
	}
	return e.Value, true, nil
}

// fences grants and releases the lock of each key rounds times, straight
// through package lock, and returns the largest fence granted.
func fences(ctx context.Context, t *testing.T, c lock.RedisClient, name string, keys []string, rounds int) int64 {
	t.Helper()
	lk, err := lock.NewRedis(c, lock.RedisOptions{Namespace: name})
	if err != nil {
		t.Fatal(err)
	}
	var top int64
	for range rounds {
		for _, k := range keys {
			l, err := lk.TryAcquire(ctx, k, time.Minute)
			if err != nil {
				t.Fatalf("TryAcquire(%q): %v", k, err)
			}
			top = max(top, l.Fence())
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release(%q): %v", k, err)
			}
		}
	}
	return top
}

// checkFencesAbove grants each key's lock once and fails t for every
// fence not above before: fences must never go backwards.
func checkFencesAbove(ctx context.Context, t *testing.T, c lock.RedisClient, name string, keys []string, before int64, fault string) {
	t.Helper()
	lk, err := lock.NewRedis(c, lock.RedisOptions{Namespace: name})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		l, err := lk.TryAcquire(ctx, k, time.Minute)
		if err != nil {
			t.Errorf("after %s: TryAcquire(%q): %v", fault, k, err)
			continue
		}
		if l.Fence() <= before {
			t.Errorf("after %s: key %q granted fence %d, not above %d granted before: fences went backwards", fault, k, l.Fence(), before)
		}
		_ = l.Release(ctx)
	}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
