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
		p.lockOutcome(ctx, sp, "acquired", start, lease.Fence())
		return o, p.holdAndLoad(ctx, key, load, lease, o)
	case errors.Is(err, lock.ErrNotAcquired):
		return o, p.await(ctx, sp, key, load, o, start, woken)
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
	return guard(ctx, p.infra, "lock_acquire", func(ctx context.Context) (*lock.Lease, error) {
		return p.locker.TryAcquire(ctx, key, p.lockCfg.Lease)
	}, func(l *lock.Lease, err error) {
		// Granted after the caller gave up on it: give it back at once, or
		// every other process would wait out a whole lease.
		if err == nil && l != nil {
			rctx, cancel := context.WithTimeout(context.Background(), p.opTimeout())
			defer cancel()
			_ = l.Release(rctx)
		}
	})
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
		_, _ = guard(rctx, p.infra, "lock_release", func(ctx context.Context) (struct{}, error) {
			return struct{}{}, lease.Release(ctx)
		}, nil)
	}()
	// Another holder may have written the value between our miss and our
	// grant.
	e, f, err := p.sharedGet(ctx, key)
	switch {
	case err != nil:
		// Redis failed between the grant and now: load, and skip the
		// write-back and the announcement, which would fail too.
		o.res.FailedOpen = true
	case f == cache.Fresh && !o.force:
		p.fillL1(key, e)
		o.res, err = fromEntry(&e, SourceL2)
		return err
	}
	err = p.loadAndStore(ctx, key, load, lease.Fence(), o)
	if !o.res.FailedOpen {
		// Announce success and failure alike: on failure, waiters wake,
		// find no value and one of them takes the lock, instead of
		// sleeping out their budget.
		_, _ = guard(ctx, p.infra, "notify", func(ctx context.Context) (struct{}, error) {
			return struct{}{}, p.notifier.Notify(ctx, key)
		}, nil)
	}
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
			// No value: the holder failed or is gone. Take over if the
			// lock is free.
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
				// One last look, then load unlocked.
				if e, f, err := p.sharedGet(ctx, key); err == nil && f == cache.Fresh {
					p.fillL1(key, e)
					p.lockOutcome(ctx, sp, "waited", start, 0)
					o.res, err = fromEntry(&e, SourceWaited)
					return err
				}
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
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
		look = true
	}
}

// holderAlive reports whether the lock's holder is still extending its
// lease. A holder's watchdog extends every third of the lease, so a live
// holder's lease never runs below two thirds (less a margin for the
// extension's own latency). Assumes every process uses the same lease.
func (p *Pipeline[V]) holderAlive(ctx context.Context, key string) bool {
	type state struct {
		held bool
		left time.Duration
	}
	st, err := guard(ctx, p.infra, "lock_inspect", func(ctx context.Context) (state, error) {
		held, left, err := p.locker.Inspect(ctx, key)
		return state{held, left}, err
	}, nil)
	lease := p.lockCfg.Lease
	return err == nil && st.held && st.left > lease*2/3-lease/10
}
