package crosspod_test

import (
	"context"
	"testing"
	"time"
)

// TestStaleWhileRevalidate_refreshesOnceAcrossPods: four pods serve a key
// with stale-while-revalidate. Once its TTL has passed, every caller in
// every pod gets the stale copy at once, and exactly one background load,
// in one pod, refreshes it for all: the pods that refresh too find the
// lock held and take the new value.
func TestStaleWhileRevalidate_refreshesOnceAcrossPods(t *testing.T) {
	const (
		pods = 4
		key  = "swr"
		ttl  = 300 * time.Millisecond
	)
	srv, admin := startRedis(t)
	specs := make([]podSpec, pods)
	for i := range specs {
		specs[i] = podSpec{TTL: ttl, Stale: time.Hour}
	}
	f := startFleet(t, newName("swr"), target{Addr: srv.Addr()}, specs...)
	ctx, cancel := context.WithTimeout(context.Background(), resultBound)
	defer cancel()
	f.waitSubscribed(ctx, admin, pods)

	// The first value, loaded once, then read by every pod into its L1.
	first := f.results(f.get(0, key, 1, sleeping(0)), resultBound)
	for i := 1; i < pods; i++ {
		_ = f.results(f.get(i, key, 1, sleeping(0)), resultBound)
	}
	if n := len(f.loadsOf(key)); n != 1 {
		t.Fatalf("%d loads before the TTL passed, want 1", n)
	}
	time.Sleep(ttl + 50*time.Millisecond) // past the TTL, within the grace

	// Every pod at once: the stale copy now, one refresh, held until the
	// stale answers are in.
	var calls []call
	for i := range pods {
		calls = append(calls, f.get(i, key, callersPerPod, held))
	}
	var rs [][]callResult
	for _, c := range calls {
		rs = append(rs, f.results(c, resultBound))
	}
	stale := tallyOf(rs...)
	if stale.sources["stale"] != pods*callersPerPod || !stale.only(first[0].Value) {
		t.Fatalf("after the TTL: %v; want every caller served the stale copy %s at once", stale, first[0].Value)
	}
	refresh, ok := f.waitLoad(key, 1, stepBound)
	if !ok {
		t.Fatal("no refresh began")
	}
	f.finishAll(key)
	// Every pod, asked again until it serves the new value from L1 or L2.
	deadline := time.Now().Add(stepBound)
	for i := range pods {
		for {
			r := f.results(f.get(i, key, 1, held), resultBound)
			if len(r) == 1 && r[0].Value == refresh.Value && r[0].Source != "stale" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pod %d does not serve the refreshed value %s: %+v", i, refresh.Value, r)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	loads := f.loadsOf(key)
	t.Logf("FIGURES stale-while-revalidate, %d pods x %d callers: %d load(s) after the TTL", pods, callersPerPod, len(loads)-1)
	if len(loads) != 2 {
		t.Fatalf("%d loads in all, want 2: the first and one refresh for every pod: %v", len(loads), describeAll(loads))
	}
}
