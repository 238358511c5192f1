package counts

import (
	"sync"
	"testing"

	"github.com/herdguard/herdguard/internal/stripe"
)

// The sources the tests count calls from, besides None and L1.
const (
	l2     = 2
	loader = 3
)

func wantRead(t *testing.T, what string, c *Counts, want Snapshot) {
	t.Helper()
	if got := c.Read(); got != want {
		t.Errorf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

// A call is counted by its source, and besides as a "not found", a
// fallback and a fail-open, each when it is one.
func TestCall_bySourceAndOutcome(t *testing.T) {
	var c Counts
	c.Call(Call{Source: l2})
	c.Call(Call{Source: loader, NotFound: true, Err: true})
	c.Call(Call{Source: loader, FellBack: true})
	c.Call(Call{Source: l2, FailedOpen: true})
	want := Snapshot{NotFound: 1, Fallbacks: 1, FailedOpen: 1}
	want.BySource[l2], want.BySource[loader] = 2, 2
	wantRead(t, "calls", &c, want)
}

// An L1 hit is counted in the stripes of the hit count, the same count
// whether the hit path or Call counted it.
func TestCall_l1HitInStripes(t *testing.T) {
	var c Counts
	c.Call(Call{Source: L1})
	c.L1Hits.Inc()
	c.Call(Call{Source: L1, NotFound: true, Err: true})
	c.L1Hits.Inc()
	c.L1NotFound()
	want := Snapshot{L1Hits: 4, NotFound: 2}
	want.BySource[L1] = 4
	wantRead(t, "hits", &c, want)
	if n := c.bySource[L1].Load(); n != 0 {
		t.Errorf("bySource[L1] = %d; want the hits in the stripes alone", n)
	}
	if n := c.Calls(L1, false); n != 4 {
		t.Errorf("Calls(L1) = %d, want 4", n)
	}
}

// An error is a call that failed with no value and no "not found": an
// error with a value (a source) is a fallback's, and a "not found" is
// none.
func TestCall_errorsWithoutValue(t *testing.T) {
	var c Counts
	c.Call(Call{Source: None, Err: true})
	c.Call(Call{Source: None, Err: true, FailedOpen: true})
	c.Call(Call{Source: None, Err: true, NotFound: true})
	c.Call(Call{Source: loader, Err: true})
	c.Call(Call{Source: None})
	want := Snapshot{Errors: 2, NotFound: 1, FailedOpen: 1}
	want.BySource[None], want.BySource[loader] = 4, 1
	wantRead(t, "errors", &c, want)
}

// A source out of range counts in no source, nor as an error; the rest
// of the call still counts.
func TestCall_sourceOutOfRange(t *testing.T) {
	var c Counts
	c.Call(Call{Source: Sources, Err: true, NotFound: true, FailedOpen: true})
	c.Call(Call{Source: -1, FellBack: true})
	wantRead(t, "out of range", &c, Snapshot{NotFound: 1, FailedOpen: 1, Fallbacks: 1})
}

// The call metric reads the calls of a source that failed open apart
// from those that did not.
func TestCalls_failedOpenApart(t *testing.T) {
	var c Counts
	c.Call(Call{Source: l2})
	c.Call(Call{Source: loader, FailedOpen: true})
	c.Call(Call{Source: loader, FailedOpen: true})
	c.Call(Call{Source: loader})
	c.Call(Call{Source: L1})
	for _, tc := range []struct {
		source     int
		failedOpen bool
		want       uint64
	}{
		{l2, false, 1}, {l2, true, 0},
		{loader, false, 1}, {loader, true, 2},
		{L1, false, 1}, {L1, true, 0},
		{None, false, 0},
	} {
		if got := c.Calls(tc.source, tc.failedOpen); got != tc.want {
			t.Errorf("Calls(%d, %v) = %d, want %d", tc.source, tc.failedOpen, got, tc.want)
		}
	}
}

// Misses and loads count on their own.
func TestMissAndLoads(t *testing.T) {
	var c Counts
	c.Miss()
	c.Miss()
	c.Loads().Add(3)
	wantRead(t, "misses and loads", &c, Snapshot{Misses: 2, Loads: 3})
}

// Cores hitting at once spread their hits over the stripes, and the
// count stays exact.
func TestL1Hit_stripedExact(t *testing.T) {
	var c Counts
	const workers, hits = 4, 2000
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range hits {
				c.L1Hits.Inc()
			}
		})
	}
	wg.Wait()
	if n := c.Read().L1Hits; n != workers*hits {
		t.Errorf("L1Hits = %d, want %d", n, workers*hits)
	}
	if used := c.L1Hits.Used(); used < stripe.Stripes/2 {
		t.Errorf("%d hits in %d of the %d stripes; want half at least", workers*hits, used, stripe.Stripes)
	}
}

// Counting an L1 hit allocates nothing.
func TestL1Hit_noAllocs(t *testing.T) {
	var c Counts
	if n := testing.AllocsPerRun(100, c.L1Hits.Inc); n != 0 {
		t.Errorf("L1Hits.Inc allocates %v times", n)
	}
}
