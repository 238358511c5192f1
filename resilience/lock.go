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

// lockedRest is the rest of a miss after a look through the lock
// (LookOrLock) that found no fresh value (pd): the winner's load, or the
// waiter's wait.
func (p *Pipeline[V]) lockedRest(ctx context.Context, key string, load LoadFunc[V], o *outcome[V], pd *pending[V]) error {
	lk, err := pd.lk, pd.err
	if err != nil && !errors.Is(err, backend.ErrNotAcquired) {
		switch coord.Classify(ctx, err) {
		case coord.Canceled:
			return err
		case coord.Infra, coord.Refused:
			// The service failed (recorded by the look): load without it.
			o.failOpen(err)
		}
		// A problem with this key's data (counted on the look's span) is
		// a miss: load, without the lock, not failing open.
		return p.loadAndStore(ctx, key, load, nil, o)
	}
	var sp trace.Span
	if p.tel.Tracing() {
		ctx, sp = p.tel.Start(ctx, telemetry.SpanLock)
		defer sp.End()
	}
	if err == nil {
		return p.won(ctx, sp, key, load, o, pd.start, &lk)
	}
	return p.await(ctx, sp, key, load, o, pd.start, pd.mark) // backend.ErrNotAcquired
}

// won is the part of a key's look (begun at start) that won the lock:
// recorded on sp, then held and loaded.
func (p *Pipeline[V]) won(ctx context.Context, sp trace.Span, key string, load LoadFunc[V], o *outcome[V], start time.Time, lk *coord.Look[V]) error {
	p.tel.LockOutcome(ctx, sp, "acquired", start, lk.Lease)
	if lk.ReadFailed != nil {
		o.failOpen(lk.ReadFailed)
	}
	return p.holdAndLoad(ctx, key, load, lk.Lease, o, lk.G)
}

// holdAndLoad is the winner's part: load, write (only while the lease
// holds), release and announce. The look that granted the lease found no
// fresh value after the grant.
//
// g is the grant when its watchdog already beats (see coord.Hold); nil makes
// one of lease.
func (p *Pipeline[V]) holdAndLoad(ctx context.Context, key string, load LoadFunc[V], lease *backend.Lease, o *outcome[V], g *coord.Grant) error {
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

// lockedMany is the batch's part with the lock: one look for every key
// (the value, else the lock), then this process's loads and its wait for
// the keys other processes hold, side by side.
func (p *Pipeline[V]) lockedMany(ctx context.Context, keys []string, load LoadManyFunc[V], outs map[string]*keyOut[V]) {
	// Subscribe before the look: a value that lands after it is
	// announced to these subscriptions.
	subs := make(map[string]<-chan struct{}, len(keys))
	for _, k := range keys {
		ch, unsubscribe := p.notifier.Subscribe(k)
		defer unsubscribe()
		subs[k] = ch
	}
	start := time.Now()
	looks, err := p.co.LookOrLockMany(ctx, keys)
	if err != nil {
		p.loadBatch(ctx, readFailed(ctx, keys, err, outs), load, outs)
		return
	}
	items, waits := p.sortLooks(ctx, keys, looks, outs, start, SourceL2, true)
	var wg sync.WaitGroup
	if len(waits) > 0 {
		// One goroutine waits for every key that others hold while this
		// one loads its own. Each writes only its keys' outcomes.
		wg.Go(func() { p.awaitMany(ctx, waits, subs, load, outs, start) })
	}
	p.loadBatch(ctx, items, load, outs)
	wg.Wait()
}

// sortLooks sorts a batch's looks (looks[i] is keys[i]'s, begun at start),
// or its reads without Lock (l2Many's: looks that try no lock): it
// settles the keys it can, and returns the items to load and the keys
// a live holder holds. A fresh value settles its key, served as src:
// SourceL2 for the batch's first look, SourceWaited for a look after a
// wake, which records the wait's outcome, waited. A key without a fresh
// value or a lease (a miss, a stale copy, or a value fresh by its expiry
// field yet unusable) is loaded without the lock, a key whose lock the
// look won is loaded under it, and a failed look goes to lookFailed.
// With keepStale (the first look), a stale copy is kept for the fallback
// chain and, with StaleWhileRevalidate, served at once while another
// process holds the key.
func (p *Pipeline[V]) sortLooks(ctx context.Context, keys []string, looks []coord.Look[V], outs map[string]*keyOut[V], start time.Time, src Source, keepStale bool) (items []*loadItem, held []string) {
	for i, k := range keys {
		out := outs[k]
		lk := &looks[i]
		e, f := lk.E, lk.F
		if keepStale && f == cache.Stale {
			out.o.stale, out.o.hasStale = e, true
		}
		switch {
		case lk.Err == nil && lk.Lease == nil && f == cache.Fresh:
			p.fillL1(k, e, out.o)
			if src == SourceWaited {
				p.tel.LockOutcome(ctx, nil, "waited", start, nil)
			}
			out.o.res, out.err = fromEntry(&e, src)
			out.set = true
		case lk.Err == nil && lk.Lease == nil:
			// No lock tried (l2Many), or a value fresh by its expiry
			// field yet unusable (counted by Decode): a miss, loaded
			// without the lock.
			items = append(items, &loadItem{key: k})
		case lk.Err == nil:
			p.tel.LockOutcome(ctx, nil, "acquired", start, lk.Lease)
			items = append(items, heldItem(k, lk))
		case errors.Is(lk.Err, backend.ErrNotAcquired):
			if keepStale && p.swr && f == cache.Stale && !e.NotFound {
				// Another process refreshes it: serve the stale copy now.
				out.o.res = Result[V]{Value: e.Value, Source: SourceStale}
				out.set = true
				continue
			}
			held = append(held, k)
		default:
			if it := p.lookFailed(ctx, k, lk.Err, out, start); it != nil {
				items = append(items, it)
			}
		}
	}
	return items, held
}

// lookFailed settles key k, whose look in a batch failed with err (the
// failure recorded by the look), or returns its load: a per-key data
// problem is a miss, loaded without the lock; the service failing for this
// key alone, a load without it, failing open; the caller's end, an error.
func (p *Pipeline[V]) lookFailed(ctx context.Context, k string, err error, out *keyOut[V], start time.Time) *loadItem {
	switch coord.Classify(ctx, err) {
	case coord.Data:
		p.tel.CorruptEntry(ctx, nil)
		return &loadItem{key: k}
	case coord.Infra, coord.Refused:
		p.tel.LockOutcome(ctx, nil, "failed_open", start, nil)
		return &loadItem{key: k, failOpen: err}
	}
	out.err, out.set = err, true
	return nil
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
