package crosspod_test

import (
	"context"
	"testing"
	"time"
)

// TestMixedSettings_oneLoad checks that pods with different lock settings
// coordinate: a waiter judges the holder by what the holder declares, not
// by its own settings. The holder leases for 3 s (its watchdog keeps
// extending), the waiters lease for 30 s and wait 1 s; the load takes 4 s.
// Exactly one load must run, and every caller must get its value.
func TestMixedSettings_oneLoad(t *testing.T) {
	if !heartbeatSupported() {
		t.Log("LockSettings has no Heartbeat field: the heartbeat case runs with the default heartbeat")
	}
	for _, tc := range []struct {
		name           string
		holder, waiter lockConfig
	}{
		{"lease", lockConfig{Lease: 3 * time.Second}, lockConfig{Lease: 30 * time.Second}},
		// The waiters' own heartbeat, doubled, is shorter than the
		// holder's: judging by it would declare the holder dead.
		{"heartbeat", lockConfig{Lease: 3 * time.Second},
			lockConfig{Lease: 30 * time.Second, Heartbeat: 200 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testMixedSettings(t, tc.holder, tc.waiter)
		})
	}
}

func testMixedSettings(t *testing.T, holder, waiter lockConfig) {
	const (
		pods     = 4
		loadTime = 4 * time.Second
		key      = "mixed"
	)
	srv, admin := startRedis(t)
	specs := []podSpec{{Lock: holder}}
	for range pods - 1 {
		specs = append(specs, podSpec{Lock: waiter})
	}
	f := startFleet(t, newName("mixed"), target{Addr: srv.Addr()}, specs...)
	ctx, cancel := context.WithTimeout(context.Background(), resultBound)
	defer cancel()
	f.waitSubscribed(ctx, admin, pods)

	calls := []call{f.get(0, key, callersPerPod, sleeping(loadTime))}
	first, ok := f.waitLoad(key, 0, stepBound)
	if !ok || first.Pod != 0 {
		t.Fatalf("pod 0 did not begin the first load within %v (got %+v)", stepBound, first)
	}
	for i := 1; i < pods; i++ {
		calls = append(calls, f.get(i, key, callersPerPod, sleeping(loadTime)))
	}
	var rs [][]callResult
	for _, c := range calls {
		rs = append(rs, f.results(c, resultBound))
	}
	all := tallyOf(rs...)
	loads := f.loadsOf(key)
	t.Logf("FIGURES mixed settings (holder: %v; waiters: %v), %d pods x %d callers, %v load: %d load(s), max latency %v",
		holder, waiter, pods, callersPerPod, loadTime, len(loads), all.maxLatency.Round(time.Millisecond))
	if len(loads) != 1 {
		t.Errorf("%d loads, want 1 (the holder's): %v", len(loads), describeAll(loads))
	}
	if !all.only(first.Value) || all.failedOpen > 0 {
		t.Errorf("want every caller to get %s, none failed open: %v", first.Value, all)
	}
	for i := range pods {
		if n := f.duplicateLoads(i); n != 0 {
			t.Errorf("pod %d: DuplicateLoads = %d, want 0: the holder was waited for", i, n)
		}
	}
}
