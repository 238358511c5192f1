//go:build !race

package postgres

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/herdguard/herdguard/resilience"
)

// These bursts run without the race detector, whose slowdown of
// thousands of goroutines per pod on two cores is no burst a service
// meets: under it, single statements take longer than the 200 ms default
// operation timeout once they have their connection. ./scripts/test runs
// them in a step of their own.

// TestProcesses_burstOfColdKeys_defaults: a burst of 300 cold keys x 4
// pods with the defaults loads each key once and fails nothing open: the
// burst's own wait for the pool's few connections is no failing database.
func TestProcesses_burstOfColdKeys_defaults(t *testing.T) {
	burstWithDefaults(t, 4, 300, false)
}

// burstContractEnv runs TestProcesses_burstContract_defaults.
const burstContractEnv = "HERDGUARD_PG_BURST_CONTRACT"

// TestProcesses_burstContract_defaults: the burst of the design's
// contract, 5,000 cold keys x 4 pods with the defaults: one load per key,
// no call failing open. It runs only when asked: it works the whole of a
// two-core machine for 5 to 15 s (figures in docs/backends.md).
//
//	HERDGUARD_PG_BURST_CONTRACT=1 go test -count=1 -v -run TestProcesses_burstContract ./
func TestProcesses_burstContract_defaults(t *testing.T) {
	if os.Getenv(burstContractEnv) == "" {
		t.Skip("set " + burstContractEnv + "=1 to run")
	}
	burstWithDefaults(t, 4, 5000, false)
}

// TestProcesses_getMany_defaults: 4 pods ask the same 5,000 cold keys in
// one GetMany each, at once, with the defaults: one load per key, none
// failing open, one value per key. (Looked at key after key, such a batch
// took 14 s between two pipelines and loaded 2,772 of its keys twice.) It
// runs only when asked, as the burst above.
//
//	HERDGUARD_PG_BURST_CONTRACT=1 go test -count=1 -v -run TestProcesses_getMany ./
func TestProcesses_getMany_defaults(t *testing.T) {
	if os.Getenv(burstContractEnv) == "" {
		t.Skip("set " + burstContractEnv + "=1 to run")
	}
	burstWithDefaults(t, 4, 5000, true)
}

// largeBatchEnv runs TestProcesses_getMany_largeBatch.
const largeBatchEnv = "HERDGUARD_LARGE_BATCH"

// TestProcesses_getMany_largeBatch: 1 pod, then 4 pods at once, ask the
// same 100,000 cold keys in one GetMany each, with the defaults: one load
// per key, none failing open, one value per key. It logs its time beside
// the embedded pipeline's (with the same loader), and does not fail on
// it: a shared machine decides it. It runs only when asked: it takes a
// minute of the whole machine.
//
//	HERDGUARD_LARGE_BATCH=1 go test -count=1 -v -run TestProcesses_getMany_largeBatch ./
func TestProcesses_getMany_largeBatch(t *testing.T) {
	if os.Getenv(largeBatchEnv) == "" {
		t.Skip("set " + largeBatchEnv + "=1 to run")
	}
	const n = 100_000
	embedded := embeddedGetMany(t, n, 100*time.Millisecond)
	t.Logf("embedded pipeline: GetMany of %d cold keys in %v", n, embedded.Round(time.Millisecond))
	for _, pods := range []int{1, 4} {
		t.Run(fmt.Sprintf("pods=%d", pods), func(t *testing.T) {
			took := burstRun(t, pods, n, true, true)
			t.Logf("%v, %.1fx the embedded pipeline's", took.Round(time.Millisecond), float64(took)/float64(embedded))
		})
	}
}

// embeddedGetMany returns how long a GetMany of n cold keys takes on the
// embedded pipeline (no backend), with a loader that takes load per call.
func embeddedGetMany(t *testing.T, n int, load time.Duration) time.Duration {
	t.Helper()
	pipe, err := resilience.New[string]("embedded").Cache(time.Minute).Build()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pipe.Close() }()
	keys := coldKeys(n)
	start := time.Now()
	rs, err := pipe.GetMany(context.Background(), keys, func(ctx context.Context, keys []string) (map[string]string, error) {
		tm := time.NewTimer(load)
		defer tm.Stop()
		select {
		case <-tm.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		m := make(map[string]string, len(keys))
		for _, k := range keys {
			m[k] = k
		}
		return m, nil
	})
	took := time.Since(start)
	if err != nil || len(rs) != n {
		t.Fatalf("embedded GetMany: %d results, %v", len(rs), err)
	}
	return took
}
