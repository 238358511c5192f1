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
	"github.com/herdguard/herdguard/telemetry"
)

// lockedRest is the rest of a miss after a look through the lock
// (lookOrLock) that found no fresh value (pd): the winner's load, or the
// waiter's wait.
func (p *Pipeline[V]) lockedRest(ctx context.Context, key string, load LoadFunc[V], o *outcome[V], pd *pending[V]) error {
	lk, err := pd.lk, pd.err
	if err != nil && !errors.Is(err, backend.ErrNotAcquired) {
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
	return p.await(ctx, sp, key, load, o, pd.start, pd.mark) // backend.ErrNotAcquired
}

// loadUnlocked loads without the lock because the service failed (err,
// already recorded by the look).
func (p *Pipeline[V]) loadUnlocked(ctx context.Context, sp trace.Span, err error, key string, load LoadFunc[V], o *outcome[V], start time.Time) error {
	o.failOpen(err)
	p.lockOutcome(ctx, sp, "failed_open", start, nil)
	return p.loadAndStore(ctx, key, load, nil, o)
}

func (p *Pipeline[V]) lockOutcome(ctx context.Context, sp trace.Span, outcome string, start time.Time, lease *backend.Lease) {
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

func (p *Pipeline[V]) tryAcquire(ctx context.Context, key string) (*backend.Lease, error) {
	return guard(ctx, p.redisGuard, func(ctx context.Context) (*backend.Lease, error) {
		return p.locker.TryAcquire(ctx, key, p.lockCfg.Lease)
	})
}

// holdAndLoad is the winner's part: load, write (only while the lease
// holds), release and announce. The look that granted the lease found no
// fresh value after the grant.
//
// g is the grant when its watchdog already beats (see hold); nil makes
// one of lease.
func (p *Pipeline[V]) holdAndLoad(ctx context.Context, key string, load LoadFunc[V], lease *backend.Lease, o *outcome[V], g *grant) error {
	if g == nil {
		g = p.hold(ctx, lease)
	}
	defer func() {
		g.end()
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
	lease    *backend.Lease
	failOpen error
	// lost is set when the lease was found lost by a watchdog (nil
	// without a lease): the batch's, in own, or, when the lease beats
	// since its grant, g's.
	lost *atomic.Bool
	own  atomic.Bool
	g    *grant
}

// heldItem is the load of k under the lease lk won.
func heldItem[V any](k string, lk *look[V]) *loadItem {
	it := &loadItem{key: k, lease: lk.lease, failOpen: lk.readFailed}
	if lk.g != nil {
		it.lost, it.g = &lk.g.lost, lk.g
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
		case errors.Is(lk.err, backend.ErrNotAcquired):
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
	lease *backend.Lease
	// lost is set by the watchdog when an extension finds the lease gone
	// (taken over, or lost with Redis's keys): the value is then not
	// written back.
	lost atomic.Bool
	// released is set once the write-back released the lock too; read
	// and written by the holder's goroutine only.
	released bool
	// w is the lease's watchdog: a batch of one lease.
	w     watchdog
	one   [1]*backend.Lease
	onesL [1]*atomic.Bool
}

// hold starts lease's watchdog, which beats until end is called or ctx
// ends, and returns the grant it marks lost: the batch's watchdog for a
// batch of one.
func (p *Pipeline[V]) hold(ctx context.Context, lease *backend.Lease) *grant {
	g := &grant{lease: lease}
	g.one[0], g.onesL[0] = lease, &g.lost
	p.watch(ctx, &g.w, g.one[:], g.onesL[:])
	return g
}

// end stops g's watchdog, waiting for a beat under way: the lease is
// being given back, or was by a commit.
func (g *grant) end() { g.w.stop() }

// releaseLook gives back the lease lk won, if any: its watchdog stops
// and the lock is released.
func (p *Pipeline[V]) releaseLook(ctx context.Context, key string, lk *look[V]) {
	if lk.g != nil {
		lk.g.end()
	}
	if lk.lease != nil {
		p.release(ctx, key, lk.lease)
	}
}

// holdMany beats for the items' leases while their loader call runs: one
// watchdog for the batch, extending every lease in one round trip per
// beat. It marks an item whose lease was found lost. The returned stop
// ends it, and the watchdogs of the leases that beat since their grant
// (see lookThenLockMany), and waits for them.
func (p *Pipeline[V]) holdMany(ctx context.Context, items []*loadItem) (stop func()) {
	w := &watchdog{}
	var leases []*backend.Lease
	var lost []*atomic.Bool
	var own []*grant
	for _, it := range items {
		switch {
		case it.g != nil:
			own = append(own, it.g)
		case it.lease != nil:
			leases = append(leases, it.lease)
			lost = append(lost, it.lost)
		}
	}
	p.watch(ctx, w, leases, lost)
	return func() {
		w.stop()
		for _, g := range own {
			g.end()
		}
	}
}

// watchdog beats for a set of leases, each on the seam's extendMany: the
// one beat loop, for one lease (hold) or a batch's (holdMany). It runs on
// a timer: no goroutine waits between beats.
type watchdog struct {
	mu      sync.Mutex // held by a beat under way
	t       *time.Timer
	stopped bool
	// leases are those not found lost yet; lost[i] is set when leases[i]
	// is.
	leases []*backend.Lease
	lost   []*atomic.Bool
}

// watch starts w, beating for leases every period of the one that beats
// most often, until w is stopped, ctx ends, or every lease was found lost.
func (p *Pipeline[V]) watch(ctx context.Context, w *watchdog, leases []*backend.Lease, lost []*atomic.Bool) {
	if len(leases) == 0 {
		return
	}
	every := leases[0].Every()
	for _, l := range leases[1:] {
		every = min(every, l.Every())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.leases, w.lost = leases, lost
	w.t = time.AfterFunc(every, func() { p.beat(ctx, w, every) })
}

// beat is one tick of w: one extension of its leases, and the next tick
// unless w was stopped, ctx ended or no lease is left.
func (p *Pipeline[V]) beat(ctx context.Context, w *watchdog, every time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped || ctx.Err() != nil {
		return
	}
	start := time.Now()
	ectx, cancel := context.WithTimeout(ctx, every)
	gone, _ := p.co.extendMany(ectx, w.leases) // a failure: the next tick retries
	cancel()
	n := 0
	for i, l := range w.leases {
		if i < len(gone) && gone[i] {
			w.lost[i].Store(true)
			continue
		}
		w.leases[n], w.lost[n] = l, w.lost[i]
		n++
	}
	w.leases, w.lost = w.leases[:n], w.lost[:n]
	if n == 0 {
		w.stopped = true
		return
	}
	// Beats keep their period however long an extension took, as a
	// ticker's would.
	w.t.Reset(max(every-time.Since(start), 0))
}

// stop stops w, waiting for a beat under way.
func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.t != nil {
		w.t.Stop()
	}
}
