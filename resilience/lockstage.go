package resilience

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/lock"
	"github.com/herdguard/herdguard/telemetry"
)

// grant is a lease this process holds while it loads.
type grant struct {
	lease *lock.Lease
	// lost is set by the watchdog when an extension finds the lease gone
	// (taken over, or lost with Redis's keys): the value is then not
	// written back.
	lost atomic.Bool
}

// lockedLoad is the distributed-lock stage: the winner loads, the others
// wait for its value; when the lock backend fails, the load runs unlocked.
//
// woken is the subscription to key's announcements, taken before the L2
// read that missed, so no announcement after that read is lost.
func (p *Pipeline[V]) lockedLoad(ctx context.Context, key string, load LoadFunc[V], o *outcome[V], woken <-chan struct{}) (*outcome[V], error) {
	start := time.Now()
	var sp trace.Span
	if p.tel.Tracing() {
		ctx, sp = p.tel.Start(ctx, telemetry.SpanLock)
		defer sp.End()
	}
	lease, err := p.tryAcquire(ctx, key)
	switch {
	case err == nil:
		p.lockOutcome(ctx, sp, "acquired", start, lease)
		return o, p.holdAndLoad(ctx, sp, key, load, lease, o)
	case errors.Is(err, lock.ErrNotAcquired):
		return o, p.await(ctx, sp, key, load, o, start, woken)
	case ctx.Err() != nil:
		return o, err
	}
	return o, p.loadFailedOpen(ctx, sp, "lock_acquire", err, key, load, o, start)
}

// loadFailedOpen loads without the lock because Redis failed (err).
func (p *Pipeline[V]) loadFailedOpen(ctx context.Context, sp trace.Span, op string, err error, key string, load LoadFunc[V], o *outcome[V], start time.Time) error {
	o.failOpen(err)
	p.failOpen(ctx, sp, op, err)
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

// holdAndLoad is the winner's part: re-check, load, write (only while the
// lease holds), release and announce.
func (p *Pipeline[V]) holdAndLoad(ctx context.Context, sp trace.Span, key string, load LoadFunc[V], lease *lock.Lease, o *outcome[V]) error {
	g := &grant{lease: lease}
	// The watchdog beats while the loader runs; release stops it.
	lease.KeepAlive(ctx, func(error) { g.lost.Store(true) })
	defer p.release(ctx, key, lease)
	// Another holder may have written the value between our miss and our
	// grant.
	e, f, err := p.sharedGet(ctx, key)
	switch {
	case err != nil:
		// Redis failed between the grant and now: load, and skip the
		// write-back, which would fail too.
		o.failOpen(err)
	case o.accepts(&e, f):
		p.fillL1(key, e)
		o.res, err = fromEntry(&e, SourceL2)
		return err
	}
	return p.loadAndStore(ctx, key, load, g, o)
}

// release gives the lease back and wakes the waiters. It never goes
// through the Redis breaker and runs past the flight's end on a deadline
// of its own: a lock left behind would hold every other process until a
// waiter sees its holder dead.
func (p *Pipeline[V]) release(ctx context.Context, key string, lease *lock.Lease) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.redisGuard.bookkeepingTimeout())
	defer cancel()
	_ = lease.Release(rctx) // the Redis lock announces in the same round trip
	if !p.announces {
		_ = p.notifier.Notify(rctx, key)
	}
}

// sharedGet reads what lock waiters look at: L2, or without Redis, L1.
func (p *Pipeline[V]) sharedGet(ctx context.Context, key string) (cache.Entry[V], cache.Freshness, error) {
	if p.l2 != nil {
		return p.l2Get(ctx, key)
	}
	e, f := p.l1.Lookup(key)
	if e == nil {
		return cache.Entry[V]{}, f, nil
	}
	return *e, f, nil
}

// await is a waiter's part: woken by the holder's announcement, with a
// jittered backoff poll as the safety net. Each look reads the value and,
// if it is not there, tries the lock, which takes it over when the holder
// stopped beating: the first waiter to look then loads under a new grant,
// and the others keep waiting for its value. A live holder is waited for
// up to MaxWait; then the waiter loads unlocked.
//
// woken was subscribed before the L2 read that missed, and the lock was
// found held after that read: until an announcement or a poll tick, there
// is nothing new to look at, so the first look costs no Redis command.
func (p *Pipeline[V]) await(ctx context.Context, sp trace.Span, key string, load LoadFunc[V], o *outcome[V], start time.Time, woken <-chan struct{}) error {
	var wsp trace.Span
	if p.tel.Tracing() {
		ctx, wsp = p.tel.Start(ctx, telemetry.SpanLockWait)
		defer wsp.End()
	}
	bo := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(p.lockCfg.Poll),
		backoff.WithMultiplier(1.5),
		backoff.WithRandomizationFactor(0.5),
		backoff.WithMaxInterval(time.Second),
		backoff.WithMaxElapsedTime(0), // bounded by MaxWait below, not by the backoff
	)
	// Without Redis, the miss was the L1 lookup, made before the
	// subscription: look once.
	look := p.l2 == nil
	select {
	case <-woken: // announced since the L2 read
		look = true
	default:
	}
	for {
		if look {
			e, f, err := p.sharedGet(ctx, key)
			switch {
			case err != nil:
				return p.loadFailedOpen(ctx, sp, "l2_get", err, key, load, o, start)
			case o.accepts(&e, f):
				p.fillL1(key, e)
				p.lockOutcome(ctx, sp, "waited", start, nil)
				o.res, err = fromEntry(&e, SourceWaited)
				return err
			}
			// No value: the holder is loading, failed, or is dead.
			lease, err := p.tryAcquire(ctx, key)
			switch {
			case err == nil:
				p.lockOutcome(ctx, sp, "acquired", start, lease)
				return p.holdAndLoad(ctx, sp, key, load, lease, o)
			case errors.Is(err, lock.ErrNotAcquired):
			case ctx.Err() != nil:
				return err
			default:
				return p.loadFailedOpen(ctx, sp, "lock_acquire", err, key, load, o, start)
			}
		}
		left := p.lockCfg.MaxWait - time.Since(start)
		if left <= 0 {
			p.lockOutcome(ctx, sp, "timeout", start, nil)
			if wsp != nil {
				wsp.AddEvent("MaxWait spent while the holder lives; loading unlocked")
			}
			return p.loadAndStore(ctx, key, load, nil, o)
		}
		t := time.NewTimer(min(bo.NextBackOff(), left))
		select {
		case <-woken:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
		look = true
	}
}
