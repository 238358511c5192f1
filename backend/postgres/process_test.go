package postgres

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// pods returns n pod configurations of one test's pipeline.
func pods(f *fixture, n int, c podConfig) []podConfig {
	c.DSN = srv.DSN()
	c.Prefix = f.prefix
	c.Name = "pods"
	out := make([]podConfig, n)
	for i := range out {
		out[i] = c
		out[i].Pod = i
	}
	return out
}

func all(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// checkOneValue fails t unless every caller got a value, the same one per
// key.
func checkOneValue(t *testing.T, tl tally, keys, calls int) {
	t.Helper()
	if len(tl.errs) > 0 {
		t.Fatalf("%d callers failed, first: %s", len(tl.errs), tl.errs[0])
	}
	if tl.results != calls {
		t.Fatalf("%d results, want %d", tl.results, calls)
	}
	if len(tl.values) != keys {
		t.Fatalf("values for %d keys, want %d", len(tl.values), keys)
	}
	for k, vs := range tl.values {
		if len(vs) != 1 {
			t.Fatalf("key %s: callers got %d different values: %v", k, len(vs), vs)
		}
	}
}

func TestProcesses_oneColdKey_oneLoad(t *testing.T) {
	f := newFixture(t, Options{})
	server(t)
	const n, callers = 8, 64
	fl := startPods(t, pods(f, n, podConfig{Keys: []string{"hot"}, Callers: callers, Load: 100 * time.Millisecond, Counted: true}))
	fl.goAll(all(n)...)
	tl := fl.collect(n, nil)
	checkOneValue(t, tl, 1, n*callers)
	if tl.loads["hot"] != 1 {
		t.Fatalf("%d loads of the cold key across %d processes x %d callers, want 1", tl.loads["hot"], n, callers)
	}
}

func TestProcesses_burstOfColdKeys_oneLoadPerKey(t *testing.T) {
	f := newFixture(t, Options{})
	server(t)
	const n, nkeys = 8, 100
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("burst:%d", i)
	}
	// Every key asked at once in every pod.
	fl := startPods(t, pods(f, n, podConfig{Keys: keys, Callers: 1, Parallel: true, Load: 100 * time.Millisecond}))
	fl.goAll(all(n)...)
	tl := fl.collect(n, nil)
	if len(tl.errs) > 0 || tl.results != n*nkeys {
		t.Fatalf("%d results, %d errors (first: %v)", tl.results, len(tl.errs), tl.errs)
	}
	var extra []string
	for _, k := range keys {
		if tl.loads[k] != 1 {
			extra = append(extra, fmt.Sprintf("%s:%d", k, tl.loads[k]))
		}
	}
	if len(extra) > 0 {
		t.Fatalf("keys not loaded exactly once: %s", strings.Join(extra, " "))
	}
}

func TestProcesses_holderKilledMidLoad_oneMoreLoad(t *testing.T) {
	f := newFixture(t, Options{})
	server(t)
	const waiters, callers = 4, 16
	beat := 100 * time.Millisecond
	cfgs := pods(f, 1+waiters, podConfig{Keys: []string{"k"}, Callers: callers, Load: 100 * time.Millisecond,
		// A lease far longer than the test: only the take-over, two
		// missed beats after the kill, lets a waiter load.
		Beat: beat, Lease: 10 * time.Minute, Counted: true})
	cfgs[0].Hold, cfgs[0].Callers = true, 1
	fl := startPods(t, cfgs)
	fl.goAll(0)
	if ev := fl.next(time.Minute); ev.Ev != "load" || ev.Pod != 0 {
		t.Fatalf("first event %+v, want pod 0's load", ev)
	}
	fl.goAll(all(1 + waiters)[1:]...)
	time.Sleep(5 * beat) // the waiters are waiting, the holder beating
	fl.kill(0)
	tl := fl.collect(waiters, nil)
	checkOneValue(t, tl, 1, waiters*callers)
	// The killed holder's load, and one more.
	if tl.loads["k"] != 1 {
		t.Fatalf("%d loads after the holder was killed, want 1", tl.loads["k"])
	}
}
