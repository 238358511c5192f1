package resilience

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/bg"
	"github.com/herdguard/herdguard/internal/coord"
	"github.com/herdguard/herdguard/telemetry"
)

// lockedRest is the rest of a miss after a look through the lock that
// found no fresh value (pd): the winner's load, the waiter's wait, or,
// after a failed look (recorded by it), the load without the lock.
func (p *Pipeline[V]) lockedRest(ctx context.Context, key string, load LoadFunc[V], o *outcome[V], pd *pending[V]) error {
	if k := kindOf(ctx, &pd.lk, pd.err); k != lookWon && k != lookHeld {
		return p.keyLook(ctx, key, load, o, k, &pd.lk, pd.err, SourceL2)
	}
	var sp trace.Span
	if p.tel.Tracing() {
		ctx, sp = p.tel.Start(ctx, telemetry.SpanLock)
		defer sp.End()
	}
	if k := p.sortLook(ctx, sp, &pd.lk, pd.err, pd.start, false); k == lookWon {
		return p.keyLook(ctx, key, load, o, k, &pd.lk, nil, SourceL2)
	}
	return p.await(ctx, sp, key, load, o, pd.start, pd.mark)
}

// lookKind is what one look through the lock found for a key: kindOf
// decides it, for a key's looks and each of a batch's alike.
type lookKind uint8

const (
	lookLeft   lookKind = iota // the caller's context ended: its error is the key's
	lookValue                  // a fresh value: served
	lookWon                    // the lock: loaded under it
	lookHeld                   // a live holder has the lock: waited for
	lookMiss                   // no fresh value, no lease: loaded without the lock
	lookFailed                 // the service failed: loaded without it, failing open
)

// kindOf is what look lk, which ended with err, found. A look without a
// fresh value or a lease (no lock tried: a read without Lock, a batch's
// value fresh yet unusable) or with bad data at the key is a miss.
func kindOf[V any](ctx context.Context, lk *coord.Look[V], err error) lookKind {
	switch {
	case err == nil && lk.Lease != nil:
		return lookWon
	case err == nil && lk.F == cache.Fresh:
		return lookValue
	case err == nil:
		return lookMiss
	case errors.Is(err, backend.ErrNotAcquired):
		return lookHeld
	case ctx.Err() != nil:
		return lookLeft
	case coord.Classify(ctx, err) == coord.Data:
		return lookMiss
	}
	return lookFailed
}

// sortLook is kindOf for a look begun at start, with the lock outcome its
// kind records, on sp (nil for a batch's): acquired, with the lease won;
// failed_open; and, after a wake (waited), waited for a value. The look
// records its failures itself, bad data at the key too (see coord.Coord).
func (p *Pipeline[V]) sortLook(ctx context.Context, sp trace.Span, lk *coord.Look[V], err error, start time.Time, waited bool) lookKind {
	k := kindOf(ctx, lk, err)
	switch {
	case k == lookWon:
		p.tel.LockOutcome(ctx, sp, "acquired", start, lk.Lease)
	case k == lookFailed:
		p.tel.LockOutcome(ctx, sp, "failed_open", start, nil)
	case k == lookValue && waited:
		p.tel.LockOutcome(ctx, sp, "waited", start, nil)
	}
	return k
}

// keyLook is the rest of a key's look of kind k (not lookHeld), which
// found lk or ended with err: the load under the lease it won, the value
// it found, served as src (load may then be nil), the load without the
// lock (failing open when the service failed), or the caller's end.
func (p *Pipeline[V]) keyLook(ctx context.Context, key string, load LoadFunc[V], o *outcome[V], k lookKind, lk *coord.Look[V], err error, src Source) error {
	switch k {
	case lookWon:
		return p.holdAndLoad(ctx, key, load, o, lk)
	case lookValue:
		p.fillL1(key, lk.E, o)
		o.res, err = fromEntry(&lk.E, src)
		return err
	case lookFailed:
		o.failOpen(err)
	case lookLeft:
		return err
	}
	return p.loadAndStore(ctx, key, load, nil, o)
}

// holdAndLoad is the winner's part, under the lease lk won (its grant,
// lk.G, may already beat; see coord.Hold): load, write (only while the
// lease holds; not after a failed read after the grant, failing open),
// release and announce.
func (p *Pipeline[V]) holdAndLoad(ctx context.Context, key string, load LoadFunc[V], o *outcome[V], lk *coord.Look[V]) error {
	if lk.ReadFailed != nil {
		o.failOpen(lk.ReadFailed)
	}
	lease, g := lk.Lease, lk.G
	if g == nil {
		g = coord.Hold(ctx, p.co, lease)
	}
	defer func() {
		g.End()
		if !g.Released {
			p.release(ctx, key, lease)
		}
	}()
	return p.loadAndStore(ctx, key, load, g, o)
}

// loadItem is one key of a loader call, with the lease it holds (nil:
// unlocked) and the Redis failure it goes on without (nil: none).
type loadItem struct {
	key      string
	lease    *backend.Lease
	failOpen error
	// lost is set when the lease was found lost by a watchdog (nil
	// without a lease): the batch's, in own, or, when the lease beats
	// since its grant, g's.
	lost *atomic.Bool
	own  atomic.Bool
	g    *coord.Grant
}

// heldItem is the load of k under the lease lk won.
func heldItem[V any](k string, lk *coord.Look[V]) *loadItem {
	it := &loadItem{key: k, lease: lk.Lease, failOpen: lk.ReadFailed}
	if lk.G != nil {
		it.lost, it.g = &lk.G.Lost, lk.G
	} else {
		it.lost = &it.own
	}
	return it
}

// unlockedItems is the load of a batch's keys without the lock: every
// key, failing open with err when it is not nil (the batch's look or read
// failed as a whole with it); none when err is the caller's own context
// ending, which settles each key with it.
func unlockedItems[V any](ctx context.Context, keys []string, err error, outs map[string]*keyOut[V]) []*loadItem {
	if coord.Classify(ctx, err) == coord.Canceled {
		for _, k := range keys {
			outs[k].err, outs[k].set = err, true
		}
		return nil
	}
	items := make([]*loadItem, len(keys))
	for i, k := range keys {
		items[i] = &loadItem{key: k, failOpen: err}
	}
	return items
}

// lookMany is the batch's first look at a chunk of keys, and what it
// calls for: with Lock, one look for every key (the value, else the
// lock), then this process's loads and its wait for the keys other
// processes hold, side by side; without, one read (looks that try no
// lock), then one loader call for the misses.
func (p *Pipeline[V]) lookMany(ctx context.Context, keys []string, load LoadManyFunc[V], outs map[string]*keyOut[V]) {
	var subs map[string]<-chan struct{}
	look := p.co.ReadMany
	if p.locker != nil {
		// Subscribe before the look: a value that lands after it is
		// announced to these subscriptions.
		subs = make(map[string]<-chan struct{}, len(keys))
		for _, k := range keys {
			ch, unsubscribe := p.notifier.Subscribe(k)
			defer unsubscribe()
			subs[k] = ch
		}
		look = p.co.LookOrLockMany
	}
	start := time.Now()
	looks, err := look(ctx, keys)
	if err != nil {
		p.loadBatch(ctx, unlockedItems(ctx, keys, err, outs), load, outs)
		return
	}
	items, waits := p.sortLooks(ctx, keys, looks, outs, start, SourceL2, true)
	if len(waits) > 0 {
		// One goroutine waits for every key that others hold while this
		// one loads its own. Each writes only its keys' outcomes.
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() { p.awaitMany(ctx, waits, subs, load, outs, start) })
	}
	p.loadBatch(ctx, items, load, outs)
}

// sortLooks sorts a batch's looks (looks[i] is keys[i]'s, begun at start),
// or its reads without Lock (looks that try no lock), by
// kindOf: it settles the keys it can, and returns the items to load and
// the keys a live holder holds. A fresh value settles its key, served as
// src: SourceL2 for the batch's first look, SourceWaited for a look after
// a wake. With keepStale (the first look), a stale copy is kept for the
// fallback chain and, with StaleWhileRevalidate, served at once while
// another process holds the key.
func (p *Pipeline[V]) sortLooks(ctx context.Context, keys []string, looks []coord.Look[V], outs map[string]*keyOut[V], start time.Time, src Source, keepStale bool) (items []*loadItem, held []string) {
	for i, k := range keys {
		out := outs[k]
		lk := &looks[i]
		if keepStale && lk.F == cache.Stale {
			out.o.stale, out.o.hasStale = lk.E, true
		}
		switch p.sortLook(ctx, nil, lk, lk.Err, start, src == SourceWaited) {
		case lookValue:
			out.err, out.set = p.keyLook(ctx, k, nil, out.o, lookValue, lk, nil, src), true
		case lookWon:
			items = append(items, heldItem(k, lk))
		case lookMiss:
			items = append(items, &loadItem{key: k})
		case lookFailed:
			items = append(items, &loadItem{key: k, failOpen: lk.Err})
		case lookHeld:
			if keepStale && p.swr && lk.F == cache.Stale && !lk.E.NotFound {
				// Another process refreshes it: serve the stale copy now.
				out.o.res, out.set = Result[V]{Value: lk.E.Value, Source: SourceStale}, true
			} else {
				held = append(held, k)
			}
		default:
			out.err, out.set = lk.Err, true
		}
	}
	return items, held
}

// releaseLook gives back the lease lk won, if any: its watchdog stops
// and the lock is released.
func (p *Pipeline[V]) releaseLook(ctx context.Context, key string, lk *coord.Look[V]) {
	if lk.G != nil {
		lk.G.End()
	}
	if lk.Lease != nil {
		p.release(ctx, key, lk.Lease)
	}
}

// holdMany beats for the items' leases while their loader call runs (see
// coord.BatchHold), marking an item whose lease was found lost. The
// returned stop ends every watchdog of the batch and waits for them.
func (p *Pipeline[V]) holdMany(ctx context.Context, items []*loadItem) (stop func()) {
	h := &coord.BatchHold{}
	for _, it := range items {
		h.Add(it.lease, it.lost, it.g)
	}
	h.Watch(ctx, p.co)
	return h.End
}

// release gives the lease back and wakes the waiters, on a goroutine of
// its own (Close waits for it), so that the callers of the load need not
// wait for it. It never goes through the Redis breaker and runs past the
// flight's end on a deadline of its own: a lock left behind would hold
// every other process until a waiter sees its holder dead.
func (p *Pipeline[V]) release(ctx context.Context, key string, lease *backend.Lease) {
	p.background(ctx, func(rctx context.Context) { p.co.Release(rctx, key, lease) })
}

// releaseMany is release for many leases, in as few round trips as the
// coordinator can.
func (p *Pipeline[V]) releaseMany(ctx context.Context, leases []*backend.Lease) {
	if len(leases) == 0 {
		return
	}
	p.background(ctx, func(rctx context.Context) { p.co.ReleaseMany(rctx, leases) })
}

// background runs fn on a goroutine of its own (Close waits for it), on
// ctx's values without its cancellation, under releaseTimeout; when the
// pipeline is closing, at once.
func (p *Pipeline[V]) background(ctx context.Context, fn func(context.Context)) {
	p.bg.Launch(ctx, bg.How{Timeout: releaseTimeout, Anyway: true}, fn)
}
