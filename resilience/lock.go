package resilience

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/lock"
	"github.com/herdguard/herdguard/telemetry"
)

// lockedRest is the rest of a miss after a look through the lock
// (lookOrLock) that found no fresh value (pd): the winner's load, or the
// waiter's wait.
func (p *Pipeline[V]) lockedRest(ctx context.Context, key string, load LoadFunc[V], o *outcome[V], pd *pending[V]) error {
	lk, err := pd.lk, pd.err
	if err != nil && !errors.Is(err, lock.ErrNotAcquired) {
		switch classify(ctx, err) {
		case errCanceled:
			return err
		case errInfra, errRefused:
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
		p.lockOutcome(ctx, sp, "acquired", pd.start, lk.lease)
		if lk.readFailed != nil {
			o.failOpen(lk.readFailed)
		}
		return p.holdAndLoad(ctx, key, load, lk.lease, o, lk.g)
	}
	return p.await(ctx, sp, key, load, o, pd.start, pd.mark) // lock.ErrNotAcquired
}

// loadUnlocked loads without the lock because the service failed (err,
// already recorded by the look).
func (p *Pipeline[V]) loadUnlocked(ctx context.Context, sp trace.Span, err error, key string, load LoadFunc[V], o *outcome[V], start time.Time) error {
	o.failOpen(err)
	p.lockOutcome(ctx, sp, "failed_open", start, nil)
	return p.loadAndStore(ctx, key, load, nil, o)
}

func (p *Pipeline[V]) lockOutcome(ctx context.Context, sp trace.Span, outcome string, start time.Time, lease *lock.Lease) {
	waited := time.Since(start)
	if sp != nil {
		sp.SetAttributes(telemetry.LockOutcome.String(outcome), telemetry.LockWaitMS.Float64(float64(waited)/float64(time.Millisecond)))
		if lease != nil {
			sp.SetAttributes(telemetry.LockFence.Int64(lease.Fence()))
			if lease.TookOver() {
				sp.AddEvent("took the lock over from a holder that stopped beating")
			}
		}
	}
	if p.tel.Metering() {
		p.tel.LockWait(ctx, outcome, waited)
	}
}

func (p *Pipeline[V]) tryAcquire(ctx context.Context, key string) (*lock.Lease, error) {
	return guard(ctx, p.redisGuard, func(ctx context.Context) (*lock.Lease, error) {
		return p.locker.TryAcquire(ctx, key, p.lockCfg.Lease)
	})
}

// holdAndLoad is the winner's part: load, write (only while the lease
// holds), release and announce. The look that granted the lease found no
// fresh value after the grant.
//
// g is the grant when its watchdog already beats (see hold); nil makes
// one of lease.
func (p *Pipeline[V]) holdAndLoad(ctx context.Context, key string, load LoadFunc[V], lease *lock.Lease, o *outcome[V], g *grant) error {
	if g == nil {
		g = hold(ctx, lease)
	}
	defer func() {
		if !g.released {
			p.release(ctx, key, lease)
		}
	}()
	return p.loadAndStore(ctx, key, load, g, o)
}

// loadItem is one key of a loader call, with the lease it holds (nil:
// unlocked) and the Redis failure it goes on without (nil: none).
type loadItem struct {
	key      string
	lease    *lock.Lease
	failOpen error
	// lost is set when the lease was found lost by a watchdog (nil
	// without a lease): the batch's, in own, or the lease's own, whose
	// grant it points to; beating says the latter.
	lost    *atomic.Bool
	own     atomic.Bool
	beating bool
}

// heldItem is the load of k under the lease lk won.
func heldItem[V any](k string, lk *look[V]) *loadItem {
	it := &loadItem{key: k, lease: lk.lease, failOpen: lk.readFailed}
	if lk.g != nil {
		it.lost, it.beating = &lk.g.lost, true
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
	looks, err := p.co.lookOrLockMany(ctx, keys)
	if err != nil {
		p.loadBatch(ctx, readFailed(ctx, keys, err, outs), load, outs)
		return
	}
	var items []*loadItem
	var waits []string
	for i, k := range keys {
		out := outs[k]
		lk := &looks[i]
		e, f := lk.e, lk.f
		if f == cache.Stale {
			out.o.stale, out.o.hasStale = e, true
		}
		switch {
		case lk.err == nil && lk.lease == nil && f == cache.Fresh:
			p.fillL1(k, e, out.o)
			out.o.res, out.err = fromEntry(&e, SourceL2)
			out.set = true
		case lk.err == nil && lk.lease == nil:
			// Fresh by its expiry field, yet unusable: a miss, loaded
			// without the lock (counted by Decode).
			items = append(items, &loadItem{key: k})
		case lk.err == nil:
			p.lockOutcome(ctx, nil, "acquired", start, lk.lease)
			items = append(items, heldItem(k, lk))
		case errors.Is(lk.err, lock.ErrNotAcquired):
			if p.swr && f == cache.Stale && !e.NotFound {
				// Another process refreshes it: serve the stale copy now.
				out.o.res = Result[V]{Value: e.Value, Source: SourceStale}
				out.set = true
				continue
			}
			waits = append(waits, k)
		default:
			if it := p.lookFailed(ctx, k, lk.err, out, start); it != nil {
				items = append(items, it)
			}
		}
	}
	var wg sync.WaitGroup
	if len(waits) > 0 {
		// One goroutine waits for every key that others hold while this
		// one loads its own. Each writes only its keys' outcomes.
		wg.Go(func() { p.awaitMany(ctx, waits, subs, load, outs, start) })
	}
	p.loadBatch(ctx, items, load, outs)
	wg.Wait()
}

// lookFailed settles key k, whose look in a batch failed with err (the
// failure recorded by the look), or returns its load: a per-key data
// problem is a miss, loaded without the lock; the service failing for this
// key alone, a load without it, failing open; the caller's end, an error.
func (p *Pipeline[V]) lookFailed(ctx context.Context, k string, err error, out *keyOut[V], start time.Time) *loadItem {
	switch classify(ctx, err) {
	case errData:
		p.corrupt(ctx, nil, err)
		return &loadItem{key: k}
	case errInfra, errRefused:
		p.lockOutcome(ctx, nil, "failed_open", start, nil)
		return &loadItem{key: k, failOpen: err}
	}
	out.err, out.set = err, true
	return nil
}

// grant is a lease this process holds while it loads.
type grant struct {
	lease *lock.Lease
	// lost is set by the watchdog when an extension finds the lease gone
	// (taken over, or lost with Redis's keys): the value is then not
	// written back.
	lost atomic.Bool
	// released is set once the write-back released the lock too; read
	// and written by the holder's goroutine only.
	released bool
}

// hold starts lease's watchdog, which beats until the lease is released
// or ctx ends, and returns the grant it marks lost.
func hold(ctx context.Context, lease *lock.Lease) *grant {
	g := &grant{lease: lease}
	lease.KeepAlive(ctx, func(error) { g.lost.Store(true) })
	return g
}

// keepAliveMany beats for the items' leases while their loader call runs:
// one watchdog for the batch, extending every lease in one round trip per
// beat. It marks an item whose lease was found lost. The returned stop
// ends it and waits for it.
func (p *Pipeline[V]) keepAliveMany(ctx context.Context, items []*loadItem) (stop func()) {
	var held []*loadItem
	var leases []*lock.Lease
	every := time.Duration(0)
	for _, it := range items {
		// A lease that beats on its own (from its grant, see
		// lookThenLockMany) beats until released or forgotten.
		if it.lease != nil && !it.beating {
			held = append(held, it)
			leases = append(leases, it.lease)
			if every == 0 || it.lease.Every() < every {
				every = it.lease.Every()
			}
		}
	}
	if len(held) == 0 {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			ectx, cancel := context.WithTimeout(ctx, every)
			lost, _ := p.co.extendMany(ectx, leases)
			cancel()
			for i, l := range lost {
				if l {
					held[i].lost.Store(true)
				}
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}
