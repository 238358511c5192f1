package resilience

import (
	"context"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/coord"
	"github.com/herdguard/herdguard/internal/rcache"
)

// pending is what a look found that calls for a load, or a wait: the rest
// of a miss, which fetchLoad runs.
type pending[V any] struct {
	// relook: no look answered (the caller's context ended during it, or
	// a refresh has had none); the rest starts with a look of its own.
	relook bool
	// mark is the notifier's, taken before the look: a subscription
	// after it misses no announcement since.
	mark uint64
	// locked: lk and err are a look through the lock (LookOrLock),
	// which began at start.
	locked bool
	start  time.Time
	lk     coord.Look[V]
	err    error
}

// fetchAlone is a miss without the single-flight: the look, then the
// load, on the caller's goroutine and context.
func (p *Pipeline[V]) fetchAlone(ctx context.Context, key string, load LoadFunc[V], o *outcome[V], hint bool) error {
	pd, finished, err := p.fetchLook(ctx, key, load, o, hint)
	if finished {
		return err
	}
	// The load runs on the caller's goroutine and context, counted for
	// Close to wait for, without p.bg.Launch: the closure Launch takes
	// would move o to the heap on every call, an L2 hit's too.
	if !p.bg.Add() {
		p.releaseLook(ctx, key, &pd.lk)
		return ErrClosed
	}
	defer p.bg.Done()
	return p.fetchLoad(ctx, key, load, o, &pd)
}

// fetchLook is the part of a miss that may answer without a load: L1
// again, then one look at L2 (with Lock, one that also tries the lock). finished says it answered, into o, with
// err; otherwise pd holds what the rest of the miss needs. A panic of user
// code that escaped its own stage's recovery becomes a [*PanicError].
func (p *Pipeline[V]) fetchLook(ctx context.Context, key string, load LoadFunc[V], o *outcome[V], hint bool) (pd pending[V], finished bool, err error) {
	// Not recoverPanic: a panic must also finish the look and drop pd.
	defer func() {
		if v := recover(); v != nil {
			p.releaseLook(ctx, key, &pd.lk) // it beats: give it back
			pd, finished, err = pending[V]{}, true, panicked("pipeline", v)
		}
	}()
	// Writes (Set, Invalidate) from now on keep this load's value out of
	// L1.
	o.gen = p.writes.gens.Stamp()
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		o.leadSpan = sc
	}
	if p.locker != nil {
		// Announcements delivered from now on reach the subscription that
		// a wait takes after the looks below, however late (see
		// await): a look that finds the value needs none.
		pd.mark = p.co.Mark()
	}
	if p.l1 != nil && !o.refresh {
		// A caller that missed L1 just before the previous shared load
		// filled it may lead a new one after that one ended: look again.
		if h, f := p.l1.Find(key); f == cache.Fresh {
			o.res, err = fromHit(h)
			return pd, true, err
		}
	}
	if p.locker != nil && !p.swr {
		// hint: L1 says L2 has it fresh, so a plain read may answer.
		return p.lookLocked(ctx, key, o, pd, hint)
	}
	if p.l2 != nil {
		e, f, err := p.co.Read(ctx, key)
		switch {
		case err != nil && ctx.Err() != nil:
			return pending[V]{relook: true}, false, nil
		case err != nil:
			o.failOpen(err)
		case o.accepts(&e, f):
			p.fillL1(key, e, o)
			o.res, err = fromEntry(&e, SourceL2)
			return pd, true, err
		case f == cache.Stale:
			o.stale, o.hasStale = e, true
			if p.swr && !e.NotFound && !o.refresh {
				p.fillL1(key, e, o)
				p.refreshAsync(ctx, key, load, e.Written)
				o.res = Result[V]{Value: e.Value, Source: SourceStale}
				return pd, true, nil
			}
		}
	}
	return pd, false, nil
}

// lookLocked is the look through the lock: one step reads the value and,
// if it does not answer o, tries the lock. finished says it answered,
// into o, with err; otherwise pd, which was given with its mark, holds
// the look (or relook: the caller's context ended during it). pd goes by
// value: a pointer to it would move every miss's pending to the heap.
func (p *Pipeline[V]) lookLocked(ctx context.Context, key string, o *outcome[V], pd pending[V], likely bool) (_ pending[V], finished bool, err error) {
	pd.locked, pd.start = true, time.Now()
	pd.lk, pd.err = p.co.LookOrLock(ctx, key, likely, o.want())
	switch k := kindOf(ctx, &pd.lk, pd.err); k {
	case lookValue: // no lock needed
		return pd, true, p.keyLook(ctx, key, nil, o, k, &pd.lk, nil, SourceL2)
	case lookLeft:
		return pending[V]{relook: true}, false, nil
	}
	if pd.lk.F == cache.Stale {
		o.stale, o.hasStale = pd.lk.E, true
	}
	return pd, false, nil
}

// l2Fresh reports whether e, an entry L1 holds past its L1 expiry, says
// that Redis still holds a fresh copy: L1 keeps an entry read from Redis
// no longer than L1TTL, but its stale-until is Redis's, so Redis's expiry
// is that less the grace. A plain read then answers; a key that may be
// cold goes to the look that also tries the lock (which over Redis reads
// plainly first only while most looks of late found their value: see
// internal/coord's redisCoord.LookOrLock).
func (p *Pipeline[V]) l2Fresh(e *rcache.Entry[V]) bool {
	return !e.NotFound && e.StaleUntil.Add(-p.grace).After(time.Now())
}

// fetchLoad is the rest of a miss after fetchLook (all of it, given a
// pd of relook): the lock, then the loader, or the wait for another
// holder's value. A panic of user code
// that escaped its own stage's recovery becomes a [*PanicError].
func (p *Pipeline[V]) fetchLoad(ctx context.Context, key string, load LoadFunc[V], o *outcome[V], pd *pending[V]) (err error) {
	defer recoverPanic("pipeline", &err)
	for {
		var finished bool
		switch {
		case pd.relook:
			// No look answered (a look cut short by its caller's leaving
			// is tried again, for those who stay): look.
			*pd, finished, err = p.fetchLook(ctx, key, load, o, false)
		case !pd.locked && p.locker != nil && !o.res.FailedOpen:
			// After a plain read that found no value to serve (with
			// StaleWhileRevalidate): the look through the lock.
			*pd, finished, err = p.lookLocked(ctx, key, o, *pd, false)
		case pd.locked:
			return p.lockedRest(ctx, key, load, o, pd)
		default:
			return p.loadAndStore(ctx, key, load, nil, o)
		}
		// A look answers, or is cut short again (its caller is gone), or
		// leaves in pd what the next step needs.
		switch {
		case finished:
			return err
		case pd.relook:
			return ctx.Err()
		}
	}
}

// keyOut is one key's outcome in a batch's shared load.
type keyOut[V any] struct {
	o   *outcome[V]
	err error
	set bool
}

// fetchMany is the shared part of a batch's misses: L1 again, then Redis
// (the value, else the lock), then one loader call. Each key gets its
// outcome; a panic of the pipeline's own reaches every key as a
// [*PanicError].
func (p *Pipeline[V]) fetchMany(ctx context.Context, keys []string, load LoadManyFunc[V]) (outs map[string]*keyOut[V]) {
	outs = make(map[string]*keyOut[V], len(keys))
	for _, k := range keys {
		// Writes (Set, Invalidate) from now on keep this load's value
		// out of L1.
		outs[k] = &keyOut[V]{o: &outcome[V]{gen: p.writes.gens.Stamp()}}
	}
	// Not recoverPanic: the panic is the error of every key not yet
	// answered, not one return value.
	defer func() {
		if v := recover(); v != nil {
			failUnset(outs, panicked("pipeline", v))
		}
	}()
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		for _, out := range outs {
			out.o.leadSpan = sc
		}
	}
	todo := make([]string, 0, len(keys))
	for _, k := range keys {
		if p.l1 != nil {
			// A load that ended just before this batch led may have
			// filled L1.
			if e, f := p.l1.Lookup(k); f == cache.Fresh {
				out := outs[k]
				out.o.res, out.err = fromEntry(e, SourceL1)
				out.set = true
				continue
			}
		}
		todo = append(todo, k)
	}
	if len(todo) == 0 {
		return outs
	}
	// Chunk by chunk: a chunk's leases are held from its look to its
	// write-back only, which a watchdog's beat covers however many keys
	// the call has (100,000 keys in one look outlasted the beat of the
	// first leases it took, and other processes took them over).
	for chunk := range slices.Chunk(todo, GetManyChunk) {
		if p.l2 != nil {
			p.lookMany(ctx, chunk, load, outs)
		} else {
			p.loadBatch(ctx, unlockedItems(ctx, chunk, nil, outs), load, outs)
		}
		if err := ctx.Err(); err != nil {
			// The chunks not reached fail with the caller's end.
			failUnset(outs, err)
			break
		}
	}
	return outs
}

// failUnset answers with err every key of outs not answered yet.
func failUnset[V any](outs map[string]*keyOut[V], err error) {
	for _, out := range outs {
		if !out.set {
			out.err, out.set = err, true
		}
	}
}

// fillL1 copies an entry read from L2 into L1, keeping L1's TTL no longer
// than L1TTL, unless key was written or dropped since o's load began.
func (p *Pipeline[V]) fillL1(key string, e rcache.Entry[V], o *outcome[V]) {
	if p.l1 == nil {
		return
	}
	p.capL1(&e)
	p.writes.gens.Fill(key, o.gen, func() { p.l1.Set(key, e) })
}

// capL1 keeps an entry's L1 freshness within L1TTL.
func (p *Pipeline[V]) capL1(e *rcache.Entry[V]) { e.CapFresh(time.Now().Add(p.l1TTL)) }

// recoverPanic, deferred, turns a panic of the named stage into a
// [*PanicError] in *err. It is the pipeline's one recoverer: the stages
// that run user code (the loader, the default) defer it, and so does
// callHook, for the user's hooks.
func recoverPanic(stage string, err *error) {
	if v := recover(); v != nil {
		*err = panicked(stage, v)
	}
}
