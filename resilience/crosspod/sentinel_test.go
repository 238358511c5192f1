package crosspod_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/rkey"
)

// failoverSpec is the pods' configuration in the failover tests: the
// default lease, so that a replicated grant outlives the failover, a short
// heartbeat and Redis breaker, loads held as long as the test needs.
var failoverSpec = podSpec{
	Lock:        lockConfig{MaxWait: 20 * time.Second, Heartbeat: 300 * time.Millisecond},
	BreakerOpen: 500 * time.Millisecond,
	LoadTimeout: resultBound,
}

// TestSentinelFailover checks a Sentinel failover in the middle of a load:
// pod A (0) holds the lock and loads when the primary is SIGKILLed, once
// after the replica received A's grant and once with the replication link
// cut so that it did not. After the promotion, locking and L2 work again
// within a bound only a hang would exceed; the value served afterwards is
// from the newest load (an older load's write never lands over a newer
// one, which two holders writing with one fence would allow); fences
// granted after the failover are above every fence granted before it.
func TestSentinelFailover(t *testing.T) {
	t.Run("grant-replicated", func(t *testing.T) { testSentinelFailover(t, true) })
	t.Run("grant-lost", func(t *testing.T) { testSentinelFailover(t, false) })
}

func testSentinelFailover(t *testing.T, replicated bool) {
	const key = "k"
	topo := redistest.StartSentinel(t)
	admin := topo.FailoverClient()
	name := newName("sentinel")
	f := startFleet(t, name, target{Sentinel: topo.Addrs()}, failoverSpec, failoverSpec, failoverSpec)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f.waitSubscribed(ctx, admin, 3)
	direct := []string{"d1", "d2", "d3"}
	top := fences(ctx, t, admin, name, direct, 3)
	if !replicated {
		topo.ReplicationLink().Cut()
		// Grants the replica never hears of.
		top = max(top, fences(ctx, t, admin, name, direct, 2))
	}

	ac := f.get(0, key, 4, held)
	if l, ok := f.waitLoad(key, 0, stepBound); !ok || l.Pod != 0 {
		t.Fatalf("pod 0 did not begin the first load within %v (got %+v)", stepBound, l)
	}
	checkReplicaHasGrant(ctx, t, topo, f.keys(), key, replicated)
	killAt := time.Now()
	if err := topo.Primary().Kill(); err != nil {
		t.Fatal(err)
	}
	promoted := watch(func() error { return topo.WaitMaster(ctx, topo.Replica().Addr()) })
	backAt, ok := f.probe(1, probeKeys("sentinel", 1))
	promotedAt, err := promoted()
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatalf("locking and L2 not back within %v of the primary's death", probeBound)
	}
	t.Logf("FIGURES sentinel failover (grant replicated: %v): every sentinel names the replica %v after the primary was SIGKILLed; locking and L2 back %v after the kill",
		replicated, promotedAt.Sub(killAt).Round(time.Millisecond), backAt.Sub(killAt).Round(time.Millisecond))
	for _, i := range []int{0, 2} {
		if _, ok := f.probe(i, probeKeys("sentinel", i)); !ok {
			t.Fatalf("pod %d: locking and L2 not back within %v of the failover", i, probeBound)
		}
	}
	serving := time.Now()

	before := f.loadCount()
	var bc call
	if replicated {
		// B finds A's grant on the new primary and waits for it (or,
		// having seen no heartbeat through the failover, takes over).
		bc = f.get(1, key, 4, sleeping(200*time.Millisecond))
		if !f.waitScript(1, key, 0, stepBound) {
			t.Fatalf("pod 1 did not try the lock within %v", stepBound)
		}
		f.finish(0, key)
	} else {
		// B finds no grant on the new primary: it loads, and its load
		// completes before A's older one.
		bc = f.get(1, key, 4, sleeping(50*time.Millisecond))
		b := tallyOf(f.results(bc, resultBound))
		if _, ok := f.waitLoad(key, before, 0); !ok {
			t.Fatalf("pod 1 did not load after the failover: %v", b)
		}
		f.finish(0, key)
	}
	if a := tallyOf(f.results(ac, resultBound)); a.errCount > 0 {
		t.Errorf("pod 0's callers: %v", a)
	}
	b := tallyOf(f.results(bc, resultBound))
	newest := newestLoad(f.loadsOf(key))
	if !b.only(newest.Value) {
		t.Errorf("pod 1's callers: want %s from the newest load: %v", describe(newest), b)
	}
	checkServedNewest(ctx, t, f, admin, key, newest, 2)
	checkFencesAbove(ctx, t, admin, name, direct, top, "the failover")
	f.checkHistory(consistency{L1TTL: time.Minute, Outages: []outage{{From: killAt, To: serving}}})
}

// checkReplicaHasGrant fails t unless the replica holds key's lock (when
// want) or does not (when not).
func checkReplicaHasGrant(ctx context.Context, t *testing.T, topo *redistest.Sentinel, ks rkey.Space, key string, want bool) {
	t.Helper()
	rc := topo.Replica().Client(adminOpts)
	if want {
		if err := topo.WaitReplicated(ctx); err != nil {
			t.Fatal(err)
		}
	}
	n, err := rc.Exists(ctx, ks.Lock(key)).Result()
	switch {
	case err != nil:
		t.Fatalf("replica: %v", err)
	case want && n == 0:
		t.Fatal("the replica has no lock for the key after catching up")
	case !want && n != 0:
		t.Fatal("the replica received the grant through a cut link: the test did not test")
	}
}

// newestLoad returns the load that began last, by the pods' shared clock.
func newestLoad(ls []loadEvent) loadEvent {
	var best loadEvent
	var bestStart time.Time
	for _, l := range ls {
		v, err := parseValue(l.Value)
		if err == nil && v.Start.After(bestStart) {
			best, bestStart = l, v.Start
		}
	}
	return best
}

// checkServedNewest fails t unless L2 holds the newest load's value and a
// pod that never read the key (pod fresh) is served it.
func checkServedNewest(ctx context.Context, t *testing.T, f *fleet, c redis.UniversalClient, key string, newest loadEvent, fresh int) {
	t.Helper()
	v, ok, err := l2Value(ctx, c, f.name, key)
	if err != nil || !ok || v != newest.Value {
		fence, ferr := c.HGet(ctx, f.keys().Value(key), rkey.FieldFence).Result()
		if errors.Is(ferr, redis.Nil) {
			fence = "none"
		}
		t.Errorf("L2 holds %q (hit %v, %v; fence %s), want %s, the newest load's: an older load's write landed over a newer one",
			v, ok, err, fence, describe(newest))
	}
	if r := tallyOf(f.results(f.get(fresh, key, 4, sleeping(50*time.Millisecond)), resultBound)); !r.only(newest.Value) {
		t.Errorf("a fresh pod is served: want %s: %v", describe(newest), r)
	}
}
