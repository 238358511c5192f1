package resilience

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/bg"
	"github.com/herdguard/herdguard/internal/coord"
	sflight "github.com/herdguard/herdguard/internal/flight"
	"github.com/herdguard/herdguard/internal/obs"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/telemetry"
)

// flightGroup runs one shared load per key in this process: the
// single-flight stage (package internal/flight). The leader runs on its
// caller's goroutine for as long as no load is needed (L1 again, the look
// at Redis), so a look that finds the value costs nothing more than the
// look. A load, or a wait for another process's, runs on a goroutine of
// its own, detached from the caller's context, under the flight's own
// deadline (see handOff): any caller whose context ends, the leader too,
// returns at once, and the load goes on for the others.
type flightGroup[V any] = sflight.Group[outcome[V]]

// flight is one shared load; its value is its leader's outcome, a
// *outcome[V] that points at the flight's own (see ended).
type flight[V any] = sflight.Call[outcome[V]]

// joinFlight runs the shared load of key, or joins the one running. A
// caller whose ctx ends returns at once, with a nil outcome; the shared
// load goes on for the others. hint says L2 likely holds a fresh copy.
func (p *Pipeline[V]) joinFlight(ctx context.Context, key string, load LoadFunc[V], hint bool) (*outcome[V], error) {
	// The span starts before the flight so that the leader's shared load
	// (L2, lock, loader) runs under it; joiners link to it instead.
	sctx := ctx
	var sp trace.Span
	if p.tel.Tracing() {
		sctx, sp = p.tel.Start(ctx, telemetry.SpanSingleFlight)
		defer sp.End()
	}
	f, isJoiner := p.group.Join(key)
	var done chan struct{}
	if isJoiner {
		done = f.Done()
	} else {
		pd, finished, err := p.fetchLook(sctx, key, load, f.Outcome(), hint)
		if !finished {
			done, finished, err = p.handOff(ctx, sctx, key, load, f, pd)
		}
		if finished {
			p.group.End(key, f, f.Outcome(), err)
			obs.Shared(sp, false, trace.SpanContext{})
			return f.Outcome(), err
		}
	}
	select {
	case <-ctx.Done():
		if sp != nil {
			sp.AddEvent("caller left; the shared load goes on")
		}
		return nil, ctx.Err()
	case <-done:
	}
	o, err := ended[V](f.Result())
	if isJoiner {
		o = asJoiner(o) // a copy of its own to relabel
	}
	obs.Shared(sp, isJoiner, o.leadSpan)
	return o, err
}

// ended is the outcome and error that a flight ended with, val and err.
// A flight that exited before it returned has no outcome, and
// internal/flight's ErrExited as its error.
func ended[V any](val any, err error) (*outcome[V], error) {
	o, _ := val.(*outcome[V])
	if o == nil {
		o = &outcome[V]{}
	}
	return o, err
}

// asJoiner is a copy of o, as a caller that joined its load sees it.
func asJoiner[V any](o *outcome[V]) *outcome[V] {
	c := *o
	c.res = coalesced(c.res)
	return &c
}

// coalesced is r as a caller that joined another's load sees it: a value
// that load got (from the loader, a wait or L2) came to it coalesced.
func coalesced[V any](r Result[V]) Result[V] {
	if r.Source == SourceLoader || r.Source == SourceWaited || r.Source == SourceL2 {
		r.Source = SourceCoalesced
	}
	return r
}

// handOff runs the rest of a leader's flight, the part that loads or
// waits, detached from the caller's context (it keeps the leader's values,
// its span, but not its cancellation) under a deadline of its own. A
// caller that cannot leave (a context that never ends) runs it itself;
// any other gets it run on a goroutine and waits on done. finished says
// the flight ended (with err) before that: the pipeline is closing.
func (p *Pipeline[V]) handOff(ctx, sctx context.Context, key string, load LoadFunc[V], f *flight[V], pd pending[V]) (done chan struct{}, finished bool, err error) {
	done = p.group.Waitable(f)
	first := func(fctx context.Context) {
		if pd.lk.Lease != nil && pd.lk.G == nil {
			// The lease's watchdog starts now (unless it beats since its
			// grant, see internal/coord's lookThenLock), not when the
			// load's goroutine gets to run: a busy process must not look
			// dead to the others.
			pd.lk.G = coord.Hold(fctx, p.co, pd.lk.Lease)
		}
	}
	if !p.bg.Launch(sctx, bg.How{Timeout: p.flightTimeout, Inline: ctx.Done() == nil, First: first}, func(fctx context.Context) {
		p.group.Run(key, f, func() (any, error) { return f.Outcome(), p.fetchLoad(fctx, key, load, f.Outcome(), &pd) })
	}) { // closing: Close waits for loads, so none may start
		p.releaseLook(sctx, key, &pd.lk)
		return nil, true, ErrClosed
	}
	return done, false, nil
}

// answer is one missed key's outcome, delivered to the GetMany call.
type answer[V any] struct {
	key    string
	o      *outcome[V]
	err    error
	joined bool // another caller's load
}

// joinFlightMany is joinFlight for a batch's keys, without a goroutine per
// key: it joins the flights under way and leads the others (see
// internal/flight's LeadMany), whose one shared batch load runs detached
// from ctx, as handOff's does (a caller whose ctx cannot end runs it
// itself). Without the single-flight the load runs on ctx, on the
// caller's goroutine. Every key's answer goes to answers, which has room
// for them all.
func (p *Pipeline[V]) joinFlightMany(ctx context.Context, keys []string, load LoadManyFunc[V], answers chan<- answer[V]) {
	b := p.group.LeadMany(keys, func(k string, val any, err error, joined bool) {
		o, err := ended[V](val, err)
		answers <- answer[V]{key: k, o: o, err: err, joined: joined}
	})
	ours := b.Keys()
	if len(ours) == 0 {
		return
	}
	// run loads ours and ends their flights with what each got (see
	// internal/flight's Batch.Run).
	run := func(ctx context.Context) {
		b.Run(func() func(string) (any, error) {
			outs := p.fetchMany(ctx, ours, load)
			return func(k string) (any, error) { return outs[k].o, outs[k].err }
		})
	}
	if p.group == nil {
		// Nobody else waits for these loads: they run on the caller's
		// context.
		run(ctx)
		return
	}
	// The shared load outlives the caller, who may leave: others may have
	// joined it.
	if !p.bg.Launch(ctx, bg.How{Timeout: p.flightTimeout, Inline: ctx.Done() == nil}, run) {
		b.End(func(string) (any, error) { return &outcome[V]{}, ErrClosed })
	}
}

// outcome is what a shared load hands every caller that joined it.
type outcome[V any] struct {
	res      Result[V]
	stale    rcache.Entry[V] // a stale copy found in L2, for the fallback chain
	hasStale bool
	leadSpan trace.SpanContext // the leader's single-flight span (parent of the shared load), for joiners' links
	// refresh is set for a background refresh: a fresh entry serves it
	// only if written after after, the write time of the entry that
	// triggered it (a refresh by another process, say).
	refresh bool
	after   time.Time
	// gen is the write generation when the load began: its L1 fill is
	// skipped if key was written or dropped since (internal/gens).
	gen uint64
}

// accepts reports whether e, found with freshness f, answers the load o
// is for. A refresh takes only an entry written clearly after the one
// that called for it: L1 keeps write times on its monotonic clock and
// gives them back on the wall clock, a few microseconds off either way,
// so the same write read back from L2 must not pass for a newer one.
func (o *outcome[V]) accepts(e *rcache.Entry[V], f cache.Freshness) bool {
	return o.want().Takes(&e.Written, f)
}

// want is what a look for o takes.
func (o *outcome[V]) want() coord.Want { return coord.Want{Refresh: o.refresh, After: o.after} }

// failOpen marks the outcome as having gone on without Redis because of
// err.
func (o *outcome[V]) failOpen(err error) {
	o.res.FailedOpen = true
	if o.res.FailOpenCause == nil {
		o.res.FailOpenCause = err
	}
}
