package resilience

import (
	"context"

	"github.com/herdguard/herdguard/internal/coord"
	"github.com/herdguard/herdguard/internal/counts"
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
	s := p.stats.Read()
	return Stats{
		L1Hits:     s.L1Hits,
		Misses:     s.Misses,
		L2Hits:     s.BySource[SourceL2],
		Loaded:     s.BySource[SourceLoader],
		Coalesced:  s.BySource[SourceCoalesced],
		Waited:     s.BySource[SourceWaited],
		Stale:      s.BySource[SourceStale],
		Defaults:   s.BySource[SourceDefault],
		Fallbacks:  s.Fallbacks,
		FailedOpen: s.FailedOpen,
		NotFound:   s.NotFound,
		Errors:     s.Errors,
		Loads:      s.Loads,

		DuplicateLoads: s.DuplicateLoads,
	}
}

// The counters behind Stats (internal/counts) number the sources as
// Source does: these do not compile unless the two agree.
var (
	_ [counts.Sources - len(sourceNames)]struct{}
	_ [len(sourceNames) - counts.Sources]struct{}
	_ [counts.None - SourceNone]struct{}
	_ [SourceNone - counts.None]struct{}
	_ [counts.L1 - SourceL1]struct{}
	_ [SourceL1 - counts.L1]struct{}
)

// countCall counts in c a call that returns r and err, unless
// [Pipeline.lookup] counted it.
func countCall[V any](c *counts.Counts, r *Result[V], err error) {
	c.Call(counts.Call{
		Source: int(r.Source), Err: err != nil, NotFound: r.NotFound,
		FailedOpen: r.FailedOpen, FellBack: r.Cause != nil,
	})
}

// duplicates counts n duplicate loads of cause, in Stats and as
// [telemetry.MetricDuplicateLoads].
func (p *Pipeline[V]) duplicates(ctx context.Context, cause counts.Cause, n int) {
	if p.stats.Duplicates(cause, n) && p.tel.Metering() {
		p.tel.DuplicateLoads(ctx, cause.String(), n)
	}
}

// countLoad counts the load about to begin under g (nil: unlocked) as a
// duplicate when it is one ([counts.Load.Duplicate]). A load after
// MaxWait is counted where the wait ends (see await).
func (p *Pipeline[V]) countLoad(ctx context.Context, g *coord.Grant, failedOpen bool) {
	l := counts.Load{Granted: g != nil, FailedOpen: failedOpen, Locking: p.locker != nil}
	l.TookOver = g != nil && g.Lease.TookOver()
	if cause, ok := l.Duplicate(); ok {
		p.duplicates(ctx, cause, 1)
	}
}

// countBatch is countLoad for the keys of one loader call of GetMany.
func (p *Pipeline[V]) countBatch(ctx context.Context, items []*loadItem) {
	var n [counts.Causes]int
	for _, it := range items {
		l := counts.Load{Granted: it.lease != nil, FailedOpen: it.failOpen != nil, Locking: p.locker != nil}
		l.TookOver = it.lease != nil && it.lease.TookOver()
		if cause, ok := l.Duplicate(); ok {
			n[cause]++
		}
	}
	for cause, k := range n {
		p.duplicates(ctx, counts.Cause(cause), k)
	}
}
