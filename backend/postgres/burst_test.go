package postgres

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// burstWithDefaults asks nkeys cold keys at once in each of npods pods
// (processes), whose pipelines use the library's defaults (operation
// timeout, breaker, lock) and whose pools have pgxpool's default size,
// and fails t unless every key is loaded exactly once across the pods,
// no call fails open, and every caller of a key gets the same value.
// With many, each pod asks its keys in one GetMany.
func burstWithDefaults(t *testing.T, npods, nkeys int, many bool) {
	burstRun(t, npods, nkeys, many, false)
}

// burstRun is burstWithDefaults; with summary, each pod reports its
// GetMany in one event (see podConfig.Summary). It returns how long the
// burst took, from the pods' start to their last report.
func burstRun(t *testing.T, npods, nkeys int, many, summary bool) time.Duration {
	f := newFixture(t, Options{})
	server(t)
	keys := coldKeys(nkeys)
	c := podConfig{Keys: keys, Callers: 1, Parallel: true, Load: 100 * time.Millisecond, Counted: true, Many: many, Summary: summary}
	if summary {
		c.Keys, c.NKeys = nil, nkeys
	}
	fl := startPods(t, pods(f, npods, c))
	start := time.Now()
	fl.goAll(all(npods)...)
	tl := fl.collect(npods, nil)
	took := time.Since(start)
	loads, multi := 0, 0
	var extra []string
	for _, k := range keys {
		loads += tl.loads[k]
		if tl.loads[k] != 1 {
			multi++
			if len(extra) < 10 {
				extra = append(extra, fmt.Sprintf("%s:%d", k, tl.loads[k]))
			}
		}
	}
	failedOpen := 0
	for src, n := range tl.sources {
		if strings.Contains(src, "+failed-open") {
			failedOpen += n
		}
	}
	t.Logf("%d cold keys x %d pods (GetMany: %v): %v, %d loads, %d of %d calls failed open, sources %v",
		nkeys, npods, many, took.Round(time.Millisecond), loads, failedOpen, npods*nkeys, tl.sources)
	if len(tl.took) > 0 {
		t.Logf("each pod's GetMany: %v", tl.took)
	}
	if failedOpen > 0 || multi > 0 {
		t.Errorf("%d loads for %d keys (%d keys not loaded exactly once, first: %s), %d calls failed open; "+
			"want one load per key and none failing open", loads, nkeys, multi, strings.Join(extra, " "), failedOpen)
	}
	checkOneValue(t, tl, nkeys, npods*nkeys)
	return took
}
