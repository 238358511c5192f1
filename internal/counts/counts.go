// Package counts holds the counters behind a pipeline's Stats, and the
// rules that count a call, a miss and a duplicate load in them: plain
// atomic counters, kept whether or not telemetry is on.
package counts

import (
	"sync/atomic"

	"github.com/herdguard/herdguard/internal/stripe"
)

// The sources a call's value may come from are resilience's Source
// values, which it checks agree with these: Sources of them, None (a
// failed call) and L1 (the in-process cache) among them.
const (
	Sources = 8
	None    = 0
	L1      = 1
)

// Counts are the counters behind a pipeline's Stats. Its zero value is
// ready. Padding keeps the stripes of L1Hits off the lines of the fields
// before Counts in the struct that holds it, which every call reads.
type Counts struct {
	_ [64]byte
	// L1Hits is the L1 hit count, which the hit path bumps itself
	// (L1Hits.Inc). Every hit bumps it, on every core at once: it is kept
	// in stripes, so that cores hitting at once (the same hot key too)
	// rarely write one cache line.
	L1Hits   stripe.Counter
	misses   atomic.Uint64
	bySource [Sources]atomic.Uint64
	// openBySource counts the calls of bySource that failed open.
	openBySource [Sources]atomic.Uint64
	fallbacks    atomic.Uint64
	failedOpen   atomic.Uint64
	notFound     atomic.Uint64
	errors       atomic.Uint64
	loads        atomic.Uint64
	// dups counts duplicate loads by cause.
	dups [len(causeNames)]atomic.Uint64
}

// Snapshot is what Counts held when read: each counter read atomically,
// not the whole.
type Snapshot struct {
	L1Hits, Misses                                 uint64
	Fallbacks, FailedOpen, NotFound, Errors, Loads uint64
	// DuplicateLoads are the duplicate loads of every cause.
	DuplicateLoads uint64

	// BySource are the calls served from each source (BySource[L1] is
	// L1Hits).
	BySource [Sources]uint64
}

// Read returns the counts so far. Counts taken while calls run may be a
// few calls apart from one another; once the calls have returned, every
// count is exact.
func (c *Counts) Read() Snapshot {
	s := Snapshot{
		L1Hits:     c.L1Hits.Load(),
		Misses:     c.misses.Load(),
		Fallbacks:  c.fallbacks.Load(),
		FailedOpen: c.failedOpen.Load(),
		NotFound:   c.notFound.Load(),
		Errors:     c.errors.Load(),
		Loads:      c.loads.Load(),
	}
	for i := range c.bySource {
		s.BySource[i] = c.bySource[i].Load()
	}
	s.BySource[L1] = s.L1Hits
	for i := range c.dups {
		s.DuplicateLoads += c.dups[i].Load()
	}
	return s
}

// L1NotFound counts a "not found" that an L1 hit answered, the hit
// itself counted in L1Hits.
func (c *Counts) L1NotFound() { c.notFound.Add(1) }

// Miss counts a call that the in-process cache could not answer.
func (c *Counts) Miss() { c.misses.Add(1) }

// Loads is the count of loader calls, which the loader's call bumps for
// every attempt.
func (c *Counts) Loads() *atomic.Uint64 { return &c.loads }

// Call is the outcome of a call, as the counts take it.
type Call struct {
	// Source is the index of the source the value came from (None when
	// it failed).
	Source int
	// Err is set when the call returned an error.
	Err bool
	// NotFound is set when it answered "not found".
	NotFound bool
	// FailedOpen is set when it went on without Redis.
	FailedOpen bool
	// FellBack is set when the fallback chain answered it because the
	// loader failed.
	FellBack bool
}

// Call counts a call as it returns: by its source (an L1 hit in the
// stripes; a source out of range in none), failed open or not, and as
// an error when it failed with no value and no "not found"; then as a
// "not found", a fallback and a fail-open, each when it is one.
func (c *Counts) Call(r Call) {
	switch {
	case r.Source == L1:
		c.L1Hits.Inc()
	case r.Source < 0 || r.Source >= Sources:
	default:
		c.bySource[r.Source].Add(1)
		if r.FailedOpen {
			c.openBySource[r.Source].Add(1)
		}
		if r.Source == None && r.Err && !r.NotFound {
			c.errors.Add(1)
		}
	}
	if r.NotFound {
		c.notFound.Add(1)
	}
	if r.FellBack {
		c.fallbacks.Add(1)
	}
	if r.FailedOpen {
		c.failedOpen.Add(1)
	}
}

// Calls is the number of calls served from source i so far, failed open
// or not: what the pipeline's call metric reports.
func (c *Counts) Calls(i int, failedOpen bool) uint64 {
	switch {
	case failedOpen:
		return c.openBySource[i].Load()
	case i == L1:
		return c.L1Hits.Load()
	}
	return c.bySource[i].Load() - c.openBySource[i].Load()
}
