//go:build !race

package main

import "testing"

// TestBurst_pipeline_oneLoadPerKey: the pipeline's contract under a burst,
// with the library's defaults (a 200 ms Redis operation timeout): 1,000
// cold keys asked at once in each of 4 pods, three rounds after the
// warm-up; every key is loaded exactly once across the pods, no call fails
// open, no lock key is left behind, and no pod's Redis breaker opens. The
// warm-up is repeated until it leaves every breaker closed (see warmUp: a
// new process's first burst on a loaded machine can trip it).
//
// It runs without the race detector, which slows every goroutine several
// times over: on two cores, 4,000 goroutines so slowed miss the 200 ms
// Redis timeout for reasons that are the detector's, not the code's.
// ./scripts/test runs it in a step of its own.
func TestBurst_pipeline_oneLoadPerKey(t *testing.T) {
	cfg := burstConfig(modePipeline, 3)
	cfg.Keys = 1000
	rounds := runBurst(t, cfg)
	if len(rounds) != 3 {
		t.Fatalf("got %d rounds, want 3", len(rounds))
	}
	for _, s := range rounds {
		t.Logf("round %d: loads=%d fail_open=%d locks_left=%d breaker_open=%d/%d p50=%.1fms p99=%.1fms max=%.1fms",
			s.Round, s.LoaderCalls, s.FailOpen, s.LockKeysLeft, s.BreakerOpenPods, s.Pods, s.P50ms, s.P99ms, s.Maxms)
		if s.LoaderCalls != s.Keys || s.KeysMultiLoad != 0 || s.FailOpen != 0 || s.Errors != 0 ||
			s.LockKeysLeft != 0 || s.BreakerOpenPods != 0 {
			t.Errorf("round %d: %d loads for %d keys (%d keys loaded more than once, up to %d times), "+
				"%d fail-opens, %d errors, %d lock keys left (max PTTL %.0f ms), Redis breaker open in %d of %d pods "+
				"(%d of them open since an earlier round or the warm-up); "+
				"want one load per key, no fail-open, no error, no lock left, breakers closed",
				s.Round, s.LoaderCalls, s.Keys, s.KeysMultiLoad, s.MaxLoadsPerKey, s.FailOpen, s.Errors,
				s.LockKeysLeft, s.LockMaxPTTLms, s.BreakerOpenPods, s.Pods, s.BreakerOpenAtStart)
		}
	}
}
