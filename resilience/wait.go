package resilience

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/coord"
	"github.com/herdguard/herdguard/internal/fanin"
	"github.com/herdguard/herdguard/telemetry"
)

// The wait for a key another holds, and for many keys at once, in one
// loop (wait): woken by the holders' announcements, with a jittered
// backoff poll as the safety net; each look goes through the seam's look
// that also tries the lock.

// subscribe subscribes to key's announcements for a wait, given the
// notifier's mark taken before the look that found the lock held: an
// announcement delivered since then signals the channel at once. Looks
// that find the value therefore never subscribe, and a wait loses no
// wake-up. lookNow says the notifier keeps no marks: look once before
// waiting.
func (p *Pipeline[V]) subscribe(key string, mark uint64) (woken <-chan struct{}, unsubscribe func(), lookNow bool) {
	return p.co.Subscribe(key, mark)
}

// wait is the wait loop, for one key another holds (await) or for a
// batch's keys (awaitMany): woken by the holders' announcements, with a
// jittered backoff poll of every key still waited for as the safety net.
// Each look (w.look) reads the value and, if it is not there, tries the
// lock, which takes it over when the holder stopped beating: the first
// waiter to look then loads under a new grant, and the others keep
// waiting for its value. A live holder is waited for up to MaxWait; then
// the keys still waited for are loaded unlocked (w.spent). After an
// announcement, which says the value most likely landed, the look starts
// with a plain read, and tries the lock only if that finds no fresh value.
//
// The lock was found held after the look that missed, and the
// subscriptions (sub) hear of every announcement since: until an
// announcement or a poll tick there is nothing new to look at, and the
// first look costs no command.
//
// An announcement whose look finds no fresh value and the lock still held
// told nothing (forged, or a write that landed no value): that key's
// announcements then do not wake the wait again before the next poll
// tick, whose look covers them. A flood of such announcements thus costs
// at most one look per poll interval, not one per message; a true one
// after a false one waits for the tick at worst.
//
// It returns the keys still waited for when ctx ended (none otherwise).
func (p *Pipeline[V]) wait(ctx context.Context, keys []string, sub waitSub, start time.Time, w waitLooks) []string {
	bo := p.pollBackOff()
	pending := keys
	var waiting map[string]bool // the keys of pending, for a fan-in's
	if sub.heard != nil {
		waiting = make(map[string]bool, len(keys))
		for _, k := range keys {
			waiting[k] = true
		}
	}
	var quiet map[string]bool // keys heard again only after the next poll
	listened := func(k string) bool { return (waiting == nil || waiting[k]) && !quiet[k] }
	// Announced since the look: look again at once.
	due, announced := sub.drain(pending, listened), true
	if len(due) == 0 && sub.lookNow {
		due, announced = pending, false
	}
	for len(pending) > 0 {
		if len(due) > 0 {
			still := w.look(ctx, due, announced)
			pending = remaining(pending, due, still)
			if ctx.Err() != nil {
				break
			}
			if waiting != nil {
				clear(waiting)
				for _, k := range pending {
					waiting[k] = true
				}
			}
			if announced && len(still) > 0 {
				if quiet == nil {
					quiet = make(map[string]bool, len(still))
				}
				for _, k := range still {
					quiet[k] = true
				}
			}
		}
		if len(pending) == 0 {
			return nil
		}
		left := p.lockCfg.MaxWait - time.Since(start)
		if left <= 0 {
			w.spent(ctx, pending)
			return nil
		}
		// One key's subscription, quiet after a false announcement: the
		// next wake-up is the poll's.
		woken := sub.woken
		if quiet[pending[0]] {
			woken = nil
		}
		t := time.NewTimer(min(bo.NextBackOff(), left))
		due, announced = nil, true
		select {
		case <-t.C: // the poll: look at every key; it covers what was announced
			sub.drain(pending, func(string) bool { return false })
			clear(quiet)
			due, announced = pending, false
		case <-ctx.Done():
			t.Stop()
			return pending
		case <-woken:
			due = pending
		case k := <-sub.heard:
			due = fanin.Drain(sub.heard, k, listened)
		}
		t.Stop()
	}
	if ctx.Err() != nil {
		return pending
	}
	return nil
}

// waitSub is where a wait hears its keys' announcements: one key's own
// subscription (woken), or, for a batch, the fan-in of its keys' (heard).
// lookNow says the notifier keeps no marks: look once before waiting.
type waitSub struct {
	woken   <-chan struct{}
	heard   <-chan string
	lookNow bool
}

// drain returns the keys of pending announced now that keep accepts.
func (s waitSub) drain(pending []string, keep func(string) bool) []string {
	if s.heard != nil {
		return fanin.Drain(s.heard, "", keep)
	}
	select {
	case <-s.woken:
		if keep(pending[0]) {
			return pending
		}
	default:
	}
	return nil
}

// waitLooks is what a wait's looks do, for one key or a batch's.
type waitLooks struct {
	// look looks at keys (announced: woken by an announcement), settles
	// those it can, loads those it must, and returns those a live holder
	// still holds.
	look func(ctx context.Context, keys []string, announced bool) (held []string)
	// spent loads keys, still held once MaxWait is spent, unlocked.
	spent func(ctx context.Context, keys []string)
}

// remaining is pending without the keys of looked that the look settled
// (those not in still).
func remaining(pending, looked, still []string) []string {
	if len(looked) == len(pending) {
		return still // every key was looked at
	}
	if len(looked) == len(still) {
		return pending
	}
	settled := make(map[string]bool, len(looked))
	for _, k := range looked {
		settled[k] = true
	}
	for _, k := range still {
		delete(settled, k)
	}
	return slices.DeleteFunc(pending, func(k string) bool { return settled[k] })
}

// await is a waiter's part for one key: the wait loop over one key, on
// the key's own subscription (no fan-in). mark was taken before the look
// that found the lock held.
func (p *Pipeline[V]) await(ctx context.Context, sp trace.Span, key string, load LoadFunc[V], o *outcome[V], start time.Time, mark uint64) (err error) {
	woken, unsubscribe, lookNow := p.subscribe(key, mark)
	defer unsubscribe()
	var wsp trace.Span
	if p.tel.Tracing() {
		ctx, wsp = p.tel.Start(ctx, telemetry.SpanLockWait)
		defer wsp.End()
	}
	keys := []string{key}
	look := func(ctx context.Context, _ []string, announced bool) []string {
		// An announcement says the value most likely landed: with Redis,
		// a plain read, the cheapest command, answers; only when it finds
		// no fresh value does the look try the lock. A burst wakes every
		// waiter of a process at once, so their reads go out together,
		// and Redis runs no script for them.
		lk, lerr := p.co.LookOrLock(ctx, key, announced, o.want())
		switch {
		case lerr == nil && lk.Lease != nil:
			p.lockOutcome(ctx, sp, "acquired", start, lk.Lease)
			if lk.ReadFailed != nil {
				o.failOpen(lk.ReadFailed)
			}
			err = p.holdAndLoad(ctx, key, load, lk.Lease, o, nil)
		case lerr == nil:
			p.fillL1(key, lk.E, o)
			p.lockOutcome(ctx, sp, "waited", start, nil)
			o.res, err = fromEntry(&lk.E, SourceWaited)
		case errors.Is(lerr, backend.ErrNotAcquired):
			return keys
		case ctx.Err() != nil:
			err = lerr
		case coord.Classify(ctx, lerr) == coord.Data:
			p.lockOutcome(ctx, sp, "timeout", start, nil)
			err = p.loadAndStore(ctx, key, load, nil, o)
		default:
			err = p.loadUnlocked(ctx, sp, lerr, key, load, o, start)
		}
		return nil
	}
	spent := func(ctx context.Context, _ []string) {
		p.lockOutcome(ctx, sp, "timeout", start, nil)
		if wsp != nil {
			wsp.AddEvent("MaxWait spent while the holder lives; loading unlocked")
		}
		p.duplicates(ctx, dupMaxWait, 1)
		err = p.loadAndStore(ctx, key, load, nil, o)
	}
	if left := p.wait(ctx, keys, waitSub{woken: woken, lookNow: lookNow}, start, waitLooks{look: look, spent: spent}); len(left) > 0 {
		return ctx.Err()
	}
	return err
}

// awaitMany is the waiters' part for a batch's keys, in one wait: the
// wait loop over the keys, on the fan-in of their subscriptions. The keys
// that come due together are looked at in one round trip (lookAgain), and
// loaded in one loader call.
func (p *Pipeline[V]) awaitMany(ctx context.Context, keys []string, subs map[string]<-chan struct{}, load LoadManyFunc[V], outs map[string]*keyOut[V], start time.Time) {
	heard, stop := fanin.Start(keys, subs)
	defer stop()
	look := func(ctx context.Context, due []string, _ bool) []string {
		return p.lookAgain(ctx, due, load, outs, start)
	}
	spent := func(ctx context.Context, pending []string) {
		items := make([]*loadItem, len(pending))
		for i, k := range pending {
			p.lockOutcome(ctx, nil, "timeout", start, nil)
			items[i] = &loadItem{key: k}
		}
		p.duplicates(ctx, dupMaxWait, len(items))
		p.loadBatch(ctx, items, load, outs)
	}
	left := p.wait(ctx, slices.Clone(keys), waitSub{heard: heard}, start, waitLooks{look: look, spent: spent})
	for _, k := range left {
		out := outs[k]
		out.err, out.set = ctx.Err(), true
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

// lookAgain looks at the woken keys in one round trip, settles those it
// can, loads those it must, and returns those a live holder still holds.
func (p *Pipeline[V]) lookAgain(ctx context.Context, woken []string, load LoadManyFunc[V], outs map[string]*keyOut[V], start time.Time) (held []string) {
	looks, err := p.co.LookOrLockMany(ctx, woken)
	var items []*loadItem
	for i, k := range woken {
		out := outs[k]
		if err != nil {
			if coord.Classify(ctx, err) == coord.Canceled {
				out.err, out.set = err, true
			} else {
				p.lockOutcome(ctx, nil, "failed_open", start, nil)
				items = append(items, &loadItem{key: k, failOpen: err})
			}
			continue
		}
		lk := &looks[i]
		e, f := lk.E, lk.F
		switch {
		case lk.Err == nil && lk.Lease == nil && f == cache.Fresh:
			p.fillL1(k, e, out.o)
			p.lockOutcome(ctx, nil, "waited", start, nil)
			out.o.res, out.err = fromEntry(&e, SourceWaited)
			out.set = true
		case lk.Err == nil && lk.Lease == nil:
			items = append(items, &loadItem{key: k})
		case lk.Err == nil:
			p.lockOutcome(ctx, nil, "acquired", start, lk.Lease)
			items = append(items, heldItem(k, lk))
		case errors.Is(lk.Err, backend.ErrNotAcquired):
			held = append(held, k)
		default:
			if it := p.lookFailed(ctx, k, lk.Err, out, start); it != nil {
				items = append(items, it)
			}
		}
	}
	p.loadBatch(ctx, items, load, outs)
	return held
}
