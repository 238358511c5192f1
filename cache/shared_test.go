package cache_test

import (
	"context"
	"testing"
	"time"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/resilience"
)

// TestRedis_sharesAPipelinesEntries checks that a Redis of a pipeline's
// namespace (and default prefix) reads what the pipeline stores, and that
// the pipeline reads what the Redis stores and misses what it invalidates.
func TestRedis_sharesAPipelinesEntries(t *testing.T) {
	ctx := redistest.Context(t, 10*time.Second)
	ns := redistest.Namespace(t)
	rdb := cache.SharedClient()
	pipeline := func() *resilience.Pipeline[string] {
		p, err := resilience.New[string](ns).Cache(time.Minute).Redis(rdb).Build()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		return p
	}
	store, err := cache.NewRedis[string](rdb, cache.RedisOptions{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}

	if err := pipeline().Set(ctx, "a", "from the pipeline"); err != nil {
		t.Fatal(err)
	}
	if e, f, err := store.Get(ctx, "a"); err != nil || f != cache.Fresh || e.Value != "from the pipeline" {
		t.Fatalf("store.Get(a) = %+v, %v, %v; want the pipeline's value, fresh", e, f, err)
	}

	now := time.Now()
	if _, err := store.Set(ctx, "b", cache.Entry[string]{Value: "from the store", Written: now,
		Expires: now.Add(time.Minute), StaleUntil: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	loads := 0
	load := func(context.Context, string) (string, error) { loads++; return "loaded", nil }
	if v, err := pipeline().Get(ctx, "b", load); err != nil || v != "from the store" || loads != 0 {
		t.Fatalf("pipeline Get(b) = %q, %v after %d loads; want the store's value, no load", v, err, loads)
	}

	if _, err := store.Invalidate(ctx, "b", time.Minute); err != nil {
		t.Fatal(err)
	}
	if v, err := pipeline().Get(ctx, "b", load); err != nil || v != "loaded" || loads != 1 {
		t.Fatalf("pipeline Get(b) after Invalidate = %q, %v after %d loads; want one load", v, err, loads)
	}
}

// TestRedis_setNeverReplacesALockedWriteBack checks Redis.Set's promise:
// it writes as a write without a lock, so an entry that a pipeline with
// Lock wrote back under its grant's fence stays, and Set reports it was
// not stored.
func TestRedis_setNeverReplacesALockedWriteBack(t *testing.T) {
	ctx := redistest.Context(t, 10*time.Second)
	ns := redistest.Namespace(t)
	rdb := cache.SharedClient()
	p, err := resilience.New[string](ns).Cache(time.Minute).Redis(rdb).Lock(resilience.LockSettings{}).Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	load := func(context.Context, string) (string, error) { return "locked load", nil }
	if r, err := p.GetResult(ctx, "k", load); err != nil || r.Source != resilience.SourceLoader {
		t.Fatalf("cold Get = %+v, %v; want a load", r, err)
	}
	store, err := cache.NewRedis[string](rdb, cache.RedisOptions{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	stored, err := store.Set(ctx, "k", cache.Entry[string]{Value: "unlocked", Written: now,
		Expires: now.Add(time.Minute), StaleUntil: now.Add(time.Minute)})
	if err != nil || stored {
		t.Fatalf("Set over a locked write-back = %v, %v; want false, nil", stored, err)
	}
	if e, f, err := store.Get(ctx, "k"); err != nil || f != cache.Fresh || e.Value != "locked load" {
		t.Fatalf("Get = %+v, %v, %v; want the locked load's value, fresh", e, f, err)
	}
}
