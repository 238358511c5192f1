package crosspod_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/rkey"
)

// TestClusterFailover_slotRecovers checks a Redis Cluster failover in the
// middle of a load: pod A (0) holds the lock of a key and loads when the
// master of the key's slot is SIGKILLed. Its replica is promoted, and
// locking and L2 for that slot work again within a bound only a hang
// would exceed; A finishes without error, and a pod that reads the key
// afterwards is served the newest load's value.
func TestClusterFailover_slotRecovers(t *testing.T) {
	const key = "k"
	cl := redistest.StartReplicatedCluster(t, 3)
	admin := cl.Client(func(o *redis.ClusterOptions) { o.ClusterStateReloadInterval = 250 * time.Millisecond })
	name := newName("cluster")
	f := startFleet(t, name, target{Cluster: cl.Addrs()}, failoverSpec, failoverSpec, failoverSpec)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f.waitSubscribed(ctx, admin, 3)
	ks := f.keys()
	slot := redistest.KeySlot(ks.Value(key))

	ac := f.get(0, key, 4, held)
	if l, ok := f.waitLoad(key, 0, stepBound); !ok || l.Pod != 0 {
		t.Fatalf("pod 0 did not begin the first load within %v (got %+v)", stepBound, l)
	}
	old, err := cl.SlotMaster(ctx, cl.Addrs()[0], slot)
	if err != nil {
		t.Fatal(err)
	}
	killAt := time.Now()
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	promoted := watch(func() error { _, err := cl.WaitSlotMaster(ctx, slot, old); return err })
	backAt, ok := f.probe(1, slotKeys(t, ks, slot, "pod1"))
	promotedAt, err := promoted()
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatalf("locking and L2 for slot %d not back within %v of its master's death", slot, probeBound)
	}
	t.Logf("FIGURES cluster failover: slot %d's replica promoted (every node agrees) %v after its master was SIGKILLed; locking and L2 for the slot back %v after the kill",
		slot, promotedAt.Sub(killAt).Round(time.Millisecond), backAt.Sub(killAt).Round(time.Millisecond))
	// Each client finds the new master on its own; let every pod find it
	// before the key is read, so that what follows tests the lock.
	for _, i := range []int{0, 2} {
		if _, ok := f.probe(i, slotKeys(t, ks, slot, fmt.Sprint("pod", i))); !ok {
			t.Fatalf("pod %d: locking and L2 for slot %d not back within %v", i, slot, probeBound)
		}
	}
	serving := time.Now()
	f.finish(0, key)
	if a := tallyOf(f.results(ac, resultBound)); a.errCount > 0 {
		t.Errorf("pod 0's callers: %v", a)
	}
	b := tallyOf(f.results(f.get(1, key, 4, sleeping(50*time.Millisecond)), resultBound))
	newest := newestLoad(f.loadsOf(key))
	if !b.only(newest.Value) || b.failedOpen > 0 {
		t.Errorf("pod 1's callers: want %s from the newest load, none failed open: %v", describe(newest), b)
	}
	checkServedNewest(ctx, t, f, admin, key, newest, 2)
	f.checkHistory(consistency{L1TTL: time.Minute, Outages: []outage{{From: killAt, To: serving}}})
}

// slotKeys names probe keys whose Redis keys hash to slot, so that a
// probe exercises that slot's master: probe-<tag>-<n> for the n that fit
// (about one in 16384).
func slotKeys(t *testing.T, ks rkey.Space, slot int, tag string) func(int) string {
	next := 0
	return func(int) string {
		for end := next + 1<<22; next < end; next++ {
			k := fmt.Sprintf("probe-%s-%d", tag, next)
			if redistest.KeySlot(ks.Value(k)) == slot {
				next++
				return k
			}
		}
		t.Fatalf("no probe key in slot %d", slot)
		return ""
	}
}
