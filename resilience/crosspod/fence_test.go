package crosspod_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/redistest"
)

// fenceSpec is the pods' configuration in the tests where Redis loses
// keys: short lease and heartbeat (the tests are not about the defaults),
// a short Redis breaker, loads held as long as the test needs.
var fenceSpec = podSpec{
	Lock:        lockConfig{Lease: 3 * time.Second, MaxWait: 10 * time.Second, Heartbeat: 300 * time.Millisecond},
	BreakerOpen: 500 * time.Millisecond,
	LoadTimeout: resultBound,
}

// keyLoss is a fault that makes Redis lose the lock's keys.
type keyLoss func(ctx context.Context, t *testing.T, srv *redistest.Server, admin *redis.Client, name string)

// TestFences_redisLosesKeys checks that fences never go backwards and no
// value from an older load lands over a newer one when Redis loses the
// lock's keys mid-load: restarted without persistence, flushed, or
// evicting under maxmemory (allkeys-lru, volatile-ttl).
//
// Pod A (0) takes the lock and loads, held. The fault strikes. Pod B (1)
// then loads the key and completes; A finishes its older load after. The
// value in L2, and the one a fresh pod C (2) is served, must be B's. Fences
// granted through package lock after the fault must be above every fence
// granted before it.
func TestFences_redisLosesKeys(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault keyLoss
	}{
		{"restart", func(_ context.Context, t *testing.T, srv *redistest.Server, _ *redis.Client, _ string) {
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
		}},
		{"flushall", func(ctx context.Context, t *testing.T, _ *redistest.Server, admin *redis.Client, _ string) {
			if err := admin.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}},
		{"evict-allkeys-lru", evict("allkeys-lru")},
		{"evict-volatile-ttl", evict("volatile-ttl")},
	} {
		t.Run(tc.name, func(t *testing.T) { testKeyLoss(t, tc.name, tc.fault) })
	}
}

func testKeyLoss(t *testing.T, faultName string, fault keyLoss) {
	srv, admin := startRedis(t)
	name := newName("fence")
	f := startFleet(t, name, target{Addr: srv.Addr()}, fenceSpec, fenceSpec, fenceSpec)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f.waitSubscribed(ctx, admin, 3)
	const key = "k"
	direct := []string{"d1", "d2", "d3"}
	top := fences(ctx, t, admin, name, direct, 3)

	ac := f.get(0, key, 4, held)
	if l, ok := f.waitLoad(key, 0, stepBound); !ok || l.Pod != 0 {
		t.Fatalf("pod 0 did not begin the first load within %v (got %+v)", stepBound, l)
	}
	down := time.Now()
	fault(ctx, t, srv, admin, name)
	faultAt := time.Now()
	// Both pods serve again (their clients reconnected, their breakers
	// closed) before the loads race.
	for _, i := range []int{1, 0} {
		if _, ok := f.probe(i, probeKeys(faultName, i)); !ok {
			t.Fatalf("pod %d: no clean locked load within %v of the %s", i, probeBound, faultName)
		}
	}
	t.Logf("FIGURES %s mid-load: pods load cleanly under the lock again %v after the fault", faultName,
		time.Since(faultAt).Round(time.Millisecond))
	serving := time.Now()
	before := f.loadCount()
	br := f.results(f.get(1, key, 4, sleeping(50*time.Millisecond)), resultBound)
	bl, ok := f.waitLoad(key, before, 0)
	if !ok || bl.Pod != 1 {
		t.Fatalf("pod 1 did not load after the %s: %v", faultName, tallyOf(br))
	}
	if b := tallyOf(br); !b.only(bl.Value) {
		t.Errorf("pod 1's callers: want %s for all: %v", bl.Value, b)
	}
	f.finish(0, key)
	if a := tallyOf(f.results(ac, resultBound)); a.errCount > 0 {
		t.Errorf("pod 0's callers: %v", a)
	}
	if v, ok, err := l2Value(ctx, admin, name, key); err != nil || !ok || v != bl.Value {
		t.Errorf("after the %s, L2 holds %q (hit %v, %v), want the newer load's %s: an older load's write landed over a newer one",
			faultName, v, ok, err, bl.Value)
	}
	if c := tallyOf(f.results(f.get(2, key, 4, sleeping(50*time.Millisecond)), resultBound)); !c.only(bl.Value) {
		t.Errorf("a fresh pod is served: want %s from the newer load: %v", bl.Value, c)
	}
	checkFencesAbove(ctx, t, admin, name, direct, top, faultName)
	f.checkHistory(consistency{L1TTL: time.Minute, Outages: []outage{{From: down, To: serving}}})
}
