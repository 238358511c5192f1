package bench

import (
	"os"
	"os/exec"
	"regexp"
	"testing"
)

// TestBenchmarks_runOnce runs every benchmark of the package for one
// iteration, in a child process of this test binary (-short, so the
// memory benchmark fills small caches), so that a benchmark that no longer
// builds its contenders, or fails on its first call, is caught by go test.
// It asserts nothing about time.
func TestBenchmarks_runOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every benchmark once")
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0],
		"-test.run=^$", "-test.bench=.", "-test.benchtime=1x", "-test.short", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), rotateEnv+"=1") // rotation on: every order must work
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("benchmarks: %v\n%s", err, out)
	}
	for _, name := range []string{
		"L1Hit", "L1HitParallel", "L1Memory", "L2Hit", "L2HitParallel",
		"ColdMissLock", "ColdMissLockParallel", "DoBreaker", "Breaker", "BreakerParallel", "GetMany",
	} {
		if !regexp.MustCompile(`(?m)^Benchmark` + name + `/\S+\s+1\s`).Match(out) {
			t.Errorf("Benchmark%s reported no result:\n%s", name, out)
		}
	}
}
