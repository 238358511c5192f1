package resilience

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/lock"
	"github.com/herdguard/herdguard/telemetry"
)

// lockedLoad is the distributed-lock stage: the winner loads, the others
// wait for its value; when the lock backend fails, the load runs unlocked.
func (p *Pipeline[V]) lockedLoad(ctx context.Context, key string, load LoadFunc[V], o *outcome[V]) (*outcome[V], error) {
	start := time.Now()
	var sp trace.Span
	if p.tel.Tracing() {
		ctx, sp = p.tel.Start(ctx, telemetry.SpanLock)
		defer sp.End()
	}
	lease, err := p.tryAcquire(ctx, key)
	switch {
	case err == nil:
		p.lockOutcome(ctx, sp, "acquired", start, lease.Fence())
		return o, p.holdAndLoad(ctx, key, load, lease, o)
	case errors.Is(err, lock.ErrNotAcquired):
		return o, p.await(ctx, sp, key, load, o, start)
	case ctx.Err() != nil:
		return o, err
	}
	o.res.FailedOpen = true
	p.failOpen(ctx, sp, "lock_acquire", err)
	p.lockOutcome(ctx, sp, "failed_open", start, 0)
	return o, p.loadAndStore(ctx, key, load, 0, o)
}

func (p *Pipeline[V]) lockOutcome(ctx context.Context, sp trace.Span, outcome string, start time.Time, fence int64) {
	waited := time.Since(start)
	if sp != nil {
		sp.SetAttributes(telemetry.LockOutcome.String(outcome), telemetry.LockWaitMS.Float64(float64(waited)/float64(time.Millisecond)))
		if fence > 0 {
			sp.SetAttributes(telemetry.LockFence.Int64(fence))
		}
	}
	if p.tel.Metering() {
		p.tel.LockWait(ctx, outcome, waited)
	}
}

func (p *Pipeline[V]) tryAcquire(ctx context.Context, key string) (*lock.Lease, error) {
	var lease *lock.Lease
	err := p.infra.do(ctx, "lock_acquire", func(ctx context.Context) error {
		var err error
		lease, err = p.locker.TryAcquire(ctx, key, p.lockCfg.Lease)
		return err
	})
	return lease, err
}

// holdAndLoad is the winner's part: re-check, load, write, announce,
// release.
func (p *Pipeline[V]) holdAndLoad(ctx context.Context, key string, load LoadFunc[V], lease *lock.Lease, o *outcome[V]) error {
	// The watchdog extends the lease while the loader runs; Release stops it.
	lease.KeepAlive(ctx, nil)
	defer func() {
		// Release even when the flight's deadline has passed: a lock left
		// behind would hold every other process for a whole lease.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.opTimeout())
		defer cancel()
		_ = p.infra.do(rctx, "lock_release", func(ctx context.Context) error { return lease.Release(ctx) })
	}()
	// Another holder may have written the value between our miss and our
	// grant.
	if e, f, err := p.sharedGet(ctx, key); err == nil && f == cache.Fresh && !o.force {
		p.fillL1(key, e)
		o.res, err = fromEntry(&e, SourceL2)
		return err
	}
	err := p.loadAndStore(ctx, key, load, lease.Fence(), o)
	// Announce success and failure alike: on failure, waiters wake, find no
	// value and one of them takes the lock, instead of sleeping out their
	// budget.
	_ = p.infra.do(ctx, "notify", func(ctx context.Context) error { return p.notifier.Notify(ctx, key) })
	return err
}

func (p *Pipeline[V]) sharedGet(ctx context.Context, key string) (cache.Entry[V], cache.Freshness, error) {
	if p.l2 != nil {
		return p.l2Get(ctx, key)
	}
	return p.shared.Get(ctx, key)
}

func (p *Pipeline[V]) opTimeout() time.Duration {
	if p.infra != nil {
		return p.infra.opTimeout
	}
	return DefaultRedisTimeout
}

// await is a waiter's part: woken by the holder's announcement, with a
// jittered backoff poll as the safety net. Past Wait, it goes on waiting
// only while the holder is alive (extending its lease), up to MaxWait; then
// it loads unlocked.
func (p *Pipeline[V]) await(ctx context.Context, sp trace.Span, key string, load LoadFunc[V], o *outcome[V], start time.Time) error {
	var wsp trace.Span
	if p.tel.Tracing() {
		ctx, wsp = p.tel.Start(ctx, telemetry.SpanLockWait)
		defer wsp.End()
	}
	woken, unsubscribe := p.notifier.Subscribe(key)
	defer unsubscribe()
	bo := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(p.lockCfg.Poll),
		backoff.WithMultiplier(1.5),
		backoff.WithRandomizationFactor(0.5),
		backoff.WithMaxInterval(time.Second),
		backoff.WithMaxElapsedTime(0), // bounded by MaxWait below, not by the backoff
	)
	announced := true // the first look follows the subscription, as if woken
	for {
		// Subscribed first, then look: a value that landed before the
		// subscription is seen here, one that lands after wakes us.
		e, f, err := p.sharedGet(ctx, key)
		if err != nil {
			o.res.FailedOpen = true
			p.lockOutcome(ctx, sp, "failed_open", start, 0)
			return p.loadAndStore(ctx, key, load, 0, o)
		}
		if f == cache.Fresh {
			p.fillL1(key, e)
			p.lockOutcome(ctx, sp, "waited", start, 0)
			o.res, err = fromEntry(&e, SourceWaited)
			return err
		}
		if !announced { // a poll tick: the holder may be gone; take over
			lease, err := p.tryAcquire(ctx, key)
			switch {
			case err == nil:
				p.lockOutcome(ctx, sp, "acquired", start, lease.Fence())
				return p.holdAndLoad(ctx, key, load, lease, o)
			case errors.Is(err, lock.ErrNotAcquired):
			case ctx.Err() != nil:
				return err
			default:
				o.res.FailedOpen = true
				p.failOpen(ctx, sp, "lock_acquire", err)
				p.lockOutcome(ctx, sp, "failed_open", start, 0)
				return p.loadAndStore(ctx, key, load, 0, o)
			}
		}
		if elapsed := time.Since(start); elapsed >= p.lockCfg.Wait {
			if elapsed >= p.lockCfg.MaxWait || !p.holderAlive(ctx, key) {
				p.lockOutcome(ctx, sp, "timeout", start, 0)
				if wsp != nil {
					wsp.AddEvent("wait budget spent; loading unlocked")
				}
				return p.loadAndStore(ctx, key, load, 0, o)
			}
		}
		next := bo.NextBackOff()
		if left := p.lockCfg.Wait - time.Since(start); left > 0 && left < next {
			next = left // look again exactly when the budget runs out
		}
		t := time.NewTimer(next)
		select {
		case <-woken:
			announced = true
		case <-t.C:
			announced = false
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
	}
}

// holderAlive reports whether the lock's holder is still extending its
// lease. A holder's watchdog extends every third of the lease, so a live
// holder's lease never runs below two thirds (less a margin for the
// extension's own latency). Assumes every process uses the same lease.
func (p *Pipeline[V]) holderAlive(ctx context.Context, key string) bool {
	var held bool
	var left time.Duration
	err := p.infra.do(ctx, "lock_inspect", func(ctx context.Context) error {
		var err error
		held, left, err = p.locker.Inspect(ctx, key)
		return err
	})
	lease := p.lockCfg.Lease
	return err == nil && held && left > lease*2/3-lease/10
}
