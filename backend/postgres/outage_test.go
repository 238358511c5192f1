package postgres

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestProcesses_databaseStoppedMidRun_noCallerFails(t *testing.T) {
	s := server(t)
	f := newFixture(t, Options{Poll: 50 * time.Millisecond})
	const n = 4
	keys := make([]string, 40)
	for i := range keys {
		keys[i] = fmt.Sprintf("outage:%d", i)
	}
	// Short values, so that calls keep reaching the database; a short
	// operation timeout and breaker, so that the pods fail open quickly
	// and come back.
	cfgs := pods(f, n, podConfig{Keys: keys, Callers: 4, Load: 20 * time.Millisecond, Repeat: 6 * time.Second, Pause: 5 * time.Millisecond,
		Fresh: 300 * time.Millisecond, OpTimeout: 300 * time.Millisecond, BreakerOpen: 500 * time.Millisecond, Counted: true})
	fl := startPods(t, cfgs)
	fl.goAll(all(n)...)
	time.Sleep(1500 * time.Millisecond)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	tl := fl.collect(n, nil)
	if len(tl.errs) > 0 {
		t.Fatalf("%d of %d calls failed while the database was down, first: %s", len(tl.errs), tl.results, tl.errs[0])
	}
	failedOpen := 0
	for src, k := range tl.sources {
		if strings.Contains(src, "+failed-open") {
			failedOpen += k
		}
	}
	if failedOpen == 0 {
		t.Fatalf("no call failed open: the database was not stopped mid-run? sources %v", tl.sources)
	}
	t.Logf("%d calls, %d failed open, no error; sources %v", tl.results, failedOpen, tl.sources)
}
