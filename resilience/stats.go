package resilience

import (
	"context"
	"sync/atomic"

	"github.com/herdguard/herdguard/internal/coord"
	"github.com/herdguard/herdguard/internal/stripe"
	"github.com/herdguard/herdguard/telemetry"
)

// Stats are a pipeline's counts since it was built, kept with atomic
// counters whether or not telemetry is on. Calls are those of Get,
// GetResult and Do; each is counted once, when it returns, in L1Hits or
// Misses (Get and GetResult) and in at most one of L2Hits, Loaded,
// Coalesced, Waited, Stale, Defaults and Errors, by where its value came
// from ([Result.Source]).
type Stats struct {
	// L1Hits are calls answered by a fresh entry in the in-process cache.
	L1Hits uint64
	// Misses are calls of Get and GetResult that the in-process cache
	// could not answer: no entry, or a stale one.
	Misses uint64
	// L2Hits are calls answered by a fresh entry in Redis.
	L2Hits uint64
	// Loaded are calls answered by a loader call of their own.
	Loaded uint64
	// Coalesced are calls answered by a load another caller in this
	// process led.
	Coalesced uint64
	// Waited are calls answered by a value another process loaded while
	// they waited on the distributed lock.
	Waited uint64
	// Stale are calls answered with a stale copy: by
	// stale-while-revalidate, or by the fallback chain.
	Stale uint64
	// Defaults are calls answered by the fallback chain's default.
	Defaults uint64
	// Fallbacks are calls the fallback chain answered because the loader
	// failed or its breaker was open (a stale copy or the default).
	Fallbacks uint64
	// FailedOpen are calls that went on without Redis (its cache or its
	// lock) because it failed or its breaker was open.
	FailedOpen uint64
	// NotFound are calls answered with a "not found", stored or loaded.
	NotFound uint64
	// Errors are calls that returned an error other than [ErrNotFound]
	// (the caller's own cancellation included) with no value.
	Errors uint64
	// Loads are loader calls this process made: every attempt, retries
	// and background refreshes included.
	Loads uint64
	// DuplicateLoads are loads of a key this process began although
	// another load of the key was known to be under way, or may have
	// been: under a grant that took the lock over from a holder that
	// stopped beating, unlocked after MaxWait while a live holder
	// loaded, or unlocked because Redis (or the backend) failed with
	// Lock on. A healthy stampede counts none. Each is counted once, when
	// its loader call begins, whatever its retries;
	// [telemetry.MetricDuplicateLoads] gives the cause.
	DuplicateLoads uint64
}

// Stats returns the pipeline's counts so far. Each counter is read
// atomically (L1Hits is the sum of the stripes it is kept in), not the
// whole: counts taken while calls run may be a few calls apart from one
// another. Once the calls have returned, every count is exact.
func (p *Pipeline[V]) Stats() Stats {
	s := &p.stats
	return Stats{
		L1Hits:     s.l1Hits(),
		Misses:     s.misses.Load(),
		L2Hits:     s.bySource[SourceL2].Load(),
		Loaded:     s.bySource[SourceLoader].Load(),
		Coalesced:  s.bySource[SourceCoalesced].Load(),
		Waited:     s.bySource[SourceWaited].Load(),
		Stale:      s.bySource[SourceStale].Load(),
		Defaults:   s.bySource[SourceDefault].Load(),
		Fallbacks:  s.fallbacks.Load(),
		FailedOpen: s.failedOpen.Load(),
		NotFound:   s.notFound.Load(),
		Errors:     s.errors.Load(),
		Loads:      s.loads.Load(),

		DuplicateLoads: s.dups[dupTakeover].Load() + s.dups[dupMaxWait].Load() + s.dups[dupFailOpen].Load(),
	}
}

// stats are the counters behind [Stats], plain atomic counters. The L1
// hit count is bumped by every hit, on every core at once: it is kept in
// stripes (internal/stripe), so that cores hitting at once (the same hot
// key too) rarely write one cache line; padding keeps the stripes off
// those of the pipeline's other fields, which every call reads.
type stats struct {
	_        [64]byte
	l1       stripe.Counter
	misses   atomic.Uint64
	bySource [len(sourceNames)]atomic.Uint64
	// openBySource counts the calls of bySource that failed open.
	openBySource [len(sourceNames)]atomic.Uint64
	fallbacks    atomic.Uint64
	failedOpen   atomic.Uint64
	notFound     atomic.Uint64
	errors       atomic.Uint64
	loads        atomic.Uint64
	// dups counts duplicate loads by cause (dupNames).
	dups [len(dupNames)]atomic.Uint64
}

// The causes of a duplicate load, as [telemetry.MetricDuplicateLoads]
// names them.
const (
	dupTakeover = iota // under a grant that took a holder's lock over
	dupMaxWait         // unlocked, after MaxWait, while a live holder loads
	dupFailOpen        // unlocked, because the lock's backend failed
)

var dupNames = [...]string{
	dupTakeover: telemetry.DuplicateTakeover,
	dupMaxWait:  telemetry.DuplicateMaxWait,
	dupFailOpen: telemetry.DuplicateFailOpen,
}

// duplicates counts n duplicate loads of cause, in Stats and as
// [telemetry.MetricDuplicateLoads].
func (p *Pipeline[V]) duplicates(ctx context.Context, cause, n int) {
	if n <= 0 {
		return
	}
	p.stats.dups[cause].Add(uint64(n))
	if p.tel.Metering() {
		p.tel.DuplicateLoads(ctx, dupNames[cause], n)
	}
}

// l1Hit counts an L1 hit, in a stripe of the count picked at random.
func (s *stats) l1Hit() { s.l1.Inc() }

// l1Hits is the L1 hit count: exact once the calls it counts have
// returned.
func (s *stats) l1Hits() uint64 { return s.l1.Load() }

// calls is the number of calls served from source i so far, failed open
// or not: what the pipeline's call metric reports.
func (s *stats) calls(i int, failedOpen bool) uint64 {
	switch {
	case failedOpen:
		return s.openBySource[i].Load()
	case Source(i) == SourceL1:
		return s.l1Hits()
	}
	return s.bySource[i].Load() - s.openBySource[i].Load()
}

// countCall counts in s a call that returns r and err, unless
// [Pipeline.lookup] counted it.
func countCall[V any](s *stats, r *Result[V], err error) {
	switch {
	case r.Source == SourceL1:
		s.l1Hit()
	case int(r.Source) >= len(s.bySource):
	default:
		s.bySource[r.Source].Add(1)
		if r.FailedOpen {
			s.openBySource[r.Source].Add(1)
		}
		if r.Source == SourceNone && err != nil && !r.NotFound {
			s.errors.Add(1)
		}
	}
	if r.NotFound {
		s.notFound.Add(1)
	}
	if r.Cause != nil {
		s.fallbacks.Add(1)
	}
	if r.FailedOpen {
		s.failedOpen.Add(1)
	}
}

// countLoad counts the load about to begin under g (nil: unlocked) as a
// duplicate when it is one: under a grant that took the lock over, or
// failed open with Lock on. A load under a grant whose re-check failed
// open is not one: the grant still keeps the others waiting. A load after
// MaxWait is counted where the wait ends (see await).
func (p *Pipeline[V]) countLoad(ctx context.Context, g *coord.Grant, failedOpen bool) {
	switch {
	case g != nil && g.Lease.TookOver():
		p.duplicates(ctx, dupTakeover, 1)
	case g == nil && failedOpen && p.locker != nil:
		p.duplicates(ctx, dupFailOpen, 1)
	}
}

// countBatch is countLoad for the keys of one loader call of GetMany.
func (p *Pipeline[V]) countBatch(ctx context.Context, items []*loadItem) {
	var took, open int
	for _, it := range items {
		switch {
		case it.lease != nil && it.lease.TookOver():
			took++
		case it.lease == nil && it.failOpen != nil && p.locker != nil:
			open++
		}
	}
	p.duplicates(ctx, dupTakeover, took)
	p.duplicates(ctx, dupFailOpen, open)
}
