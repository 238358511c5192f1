package resilience

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel/trace"

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
		return p.holdAndLoad(ctx, key, load, lk.lease, o, pd.g)
	}
	return p.await(ctx, sp, key, load, o, pd.start, pd.mark) // lock.ErrNotAcquired
}

// subscribe subscribes to key's announcements for a wait, given the
// notifier's mark taken before the look that found the lock held: an
// announcement delivered since then signals the channel at once. Looks
// that find the value therefore never subscribe, and a wait loses no
// wake-up. lookNow says the notifier keeps no marks: look once before
// waiting.
func (p *Pipeline[V]) subscribe(key string, mark uint64) (woken <-chan struct{}, unsubscribe func(), lookNow bool) {
	return p.co.subscribe(key, mark)
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

// await is a waiter's part: woken by the holder's announcement, with a
// jittered backoff poll as the safety net. Each look reads the value and,
// if it is not there, tries the lock, which takes it over when the holder
// stopped beating: the first waiter to look then loads under a new grant,
// and the others keep waiting for its value. A live holder is waited for
// up to MaxWait; then the waiter loads unlocked. After an announcement,
// which says the value most likely landed, the look starts with a plain
// read, and tries the lock only if that finds no fresh value.
//
// The lock was found held after the look (or read) that missed, and mark
// was taken before it: the subscription hears of every announcement since,
// so until an announcement or a poll tick there is nothing new to look at,
// and the first look costs no Redis command.
//
// An announcement whose look finds no fresh value and the lock still held
// told nothing (forged, or a write that landed no value): announcements
// then do not wake the waiter again before the next poll tick, whose look
// covers them. A flood of such announcements thus costs at most one look
// per poll interval, not one per message; a true one after a false one
// waits for the tick at worst.
func (p *Pipeline[V]) await(ctx context.Context, sp trace.Span, key string, load LoadFunc[V], o *outcome[V], start time.Time, mark uint64) error {
	woken, unsubscribe, lookNow := p.subscribe(key, mark)
	defer unsubscribe()
	var wsp trace.Span
	if p.tel.Tracing() {
		ctx, wsp = p.tel.Start(ctx, telemetry.SpanLockWait)
		defer wsp.End()
	}
	bo := p.pollBackOff()
	look, announced := lookNow, false
	select {
	case <-woken: // announced since the read that missed
		look, announced = true, true
	default:
	}
	for {
		if look {
			// An announcement says the value most likely landed: with
			// Redis, a plain read, the cheapest command, answers; only
			// when it finds no fresh value does the look try the lock. A
			// burst wakes every waiter of a process at once, so their
			// reads go out together, and Redis runs no script for them.
			lk, err := p.co.lookOrLock(ctx, key, announced, o)
			switch {
			case err == nil && lk.lease != nil:
				p.lockOutcome(ctx, sp, "acquired", start, lk.lease)
				if lk.readFailed != nil {
					o.failOpen(lk.readFailed)
				}
				return p.holdAndLoad(ctx, key, load, lk.lease, o, nil)
			case err == nil:
				p.fillL1(key, lk.e, o)
				p.lockOutcome(ctx, sp, "waited", start, nil)
				o.res, err = fromEntry(&lk.e, SourceWaited)
				return err
			case errors.Is(err, lock.ErrNotAcquired):
			case ctx.Err() != nil:
				return err
			case classify(ctx, err) == errData:
				p.lockOutcome(ctx, sp, "timeout", start, nil)
				return p.loadAndStore(ctx, key, load, nil, o)
			default:
				return p.loadUnlocked(ctx, sp, err, key, load, o, start)
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
		// Still waiting after an announcement: it told nothing, so the
		// next wake-up is the poll's (see above).
		wake := woken
		if announced {
			wake = nil
		}
		t := time.NewTimer(min(bo.NextBackOff(), left))
		announced = false
		select {
		case <-wake:
			announced = true
		case <-t.C:
			// The poll's look covers what was announced before it.
			select {
			case <-woken:
			default:
			}
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
		look = true
	}
}

// pollBackOff paces the looks of a caller waiting for a key (or keys)
// another holds locked: from Poll, growing 1.5 times, jittered, up to a
// second. MaxWait bounds the wait, not the backoff.
func (p *Pipeline[V]) pollBackOff() *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(p.lockCfg.Poll),
		backoff.WithMultiplier(1.5),
		backoff.WithRandomizationFactor(0.5),
		backoff.WithMaxInterval(time.Second),
		backoff.WithMaxElapsedTime(0),
	)
}
