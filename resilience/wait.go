package resilience

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/lock"
	"github.com/herdguard/herdguard/telemetry"
)

// The wait for a key another holds, and for many keys at once: woken by
// the holder's announcement, with a jittered backoff poll as the safety
// net; each look goes through the seam's look that also tries the lock.

// subscribe subscribes to key's announcements for a wait, given the
// notifier's mark taken before the look that found the lock held: an
// announcement delivered since then signals the channel at once. Looks
// that find the value therefore never subscribe, and a wait loses no
// wake-up. lookNow says the notifier keeps no marks: look once before
// waiting.
func (p *Pipeline[V]) subscribe(key string, mark uint64) (woken <-chan struct{}, unsubscribe func(), lookNow bool) {
	return p.co.subscribe(key, mark)
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
			lk, err := p.co.lookOrLock(ctx, key, announced, o.want())
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
			p.duplicates(ctx, dupMaxWait, 1)
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

// awaitMany is the waiters' part for many keys at once, in one wait: each
// key's announcement wakes a look at the keys announced (one round trip
// for them all), with a jittered backoff poll of every key still waited
// for as the safety net. A look that takes the lock (its holder died or
// gave up) loads that key; a live holder is waited for up to MaxWait, then
// the keys still waited for are loaded without the lock. Keys that come
// due together are loaded in one loader call. A key whose announcement
// the look found false (still held, no value) is not woken by its
// announcements again before the next poll, as in await.
func (p *Pipeline[V]) awaitMany(ctx context.Context, keys []string, subs map[string]<-chan struct{}, load LoadManyFunc[V], outs map[string]*keyOut[V], start time.Time) {
	bo := p.pollBackOff()
	heard, stop := fanIn(keys, subs)
	defer stop()
	pending := slices.Clone(keys)
	waiting := make(map[string]bool, len(keys)) // the keys of pending
	for _, k := range keys {
		waiting[k] = true
	}
	quiet := map[string]bool{} // keys heard again only after the next poll
	listened := func(k string) bool { return waiting[k] && !quiet[k] }
	// Announced since the look: look again at once.
	woken := drainHeard(heard, "", listened)
	polled := false
	for len(pending) > 0 {
		if len(woken) > 0 {
			pending = p.lookAgain(ctx, woken, pending, load, outs, start)
			if ctx.Err() != nil {
				break
			}
			clear(waiting)
			for _, k := range pending {
				waiting[k] = true
			}
			if !polled {
				for _, k := range woken {
					quiet[k] = waiting[k]
				}
			}
		}
		if len(pending) == 0 {
			return
		}
		left := p.lockCfg.MaxWait - time.Since(start)
		if left <= 0 {
			items := make([]*loadItem, len(pending))
			for i, k := range pending {
				p.lockOutcome(ctx, nil, "timeout", start, nil)
				items[i] = &loadItem{key: k}
			}
			p.duplicates(ctx, dupMaxWait, len(items))
			p.loadBatch(ctx, items, load, outs)
			return
		}
		t := time.NewTimer(min(bo.NextBackOff(), left))
		woken, polled = nil, false
		select {
		case <-t.C: // the poll: look at every key; it covers what was announced
			drainHeard(heard, "", func(string) bool { return false })
			clear(quiet)
			woken, polled = slices.Clone(pending), true
		case <-ctx.Done():
		case k := <-heard:
			woken = drainHeard(heard, k, listened)
		}
		t.Stop()
	}
	if err := ctx.Err(); err != nil {
		for _, k := range pending {
			out := outs[k]
			out.err, out.set = err, true
		}
	}
}

// fanIn passes the announcements of keys, heard on their subscriptions,
// on one channel: a goroutine per fanInKeys keys selects over theirs.
// One select over every key would cost each wake-up the whole set, and
// reflect.Select refuses more than 65,536 cases. stop ends the goroutines.
func fanIn(keys []string, subs map[string]<-chan struct{}) (heard <-chan string, stop func()) {
	ch := make(chan string, min(len(keys), fanInKeys))
	done := make(chan struct{})
	var wg sync.WaitGroup
	for chunk := range slices.Chunk(keys, fanInKeys) {
		cases := make([]reflect.SelectCase, 0, 1+len(chunk))
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(done)})
		for _, k := range chunk {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(subs[k])})
		}
		wg.Go(func() {
			for {
				i, _, _ := reflect.Select(cases)
				if i == 0 {
					return
				}
				select {
				case ch <- chunk[i-1]:
				case <-done:
					return
				}
			}
		})
	}
	return ch, func() { close(done); wg.Wait() }
}

// fanInKeys is how many keys' subscriptions one goroutine of fanIn
// selects over.
const fanInKeys = 64

// drainHeard returns first (unless empty) and the keys heard now, once
// each, that keep accepts.
func drainHeard(heard <-chan string, first string, keep func(string) bool) []string {
	var woken []string
	seen := map[string]bool{}
	add := func(k string) {
		if !seen[k] && keep(k) {
			seen[k] = true
			woken = append(woken, k)
		}
	}
	if first != "" {
		add(first)
	}
	for {
		select {
		case k := <-heard:
			add(k)
		default:
			return woken
		}
	}
}

// lookAgain looks at the woken keys in one round trip, settles those it
// can, loads those it must, and returns the keys still waited for.
func (p *Pipeline[V]) lookAgain(ctx context.Context, woken, pending []string, load LoadManyFunc[V], outs map[string]*keyOut[V], start time.Time) []string {
	looks, err := p.co.lookOrLockMany(ctx, woken)
	done := make(map[string]bool, len(woken))
	var items []*loadItem
	for i, k := range woken {
		out := outs[k]
		if err != nil {
			if classify(ctx, err) == errCanceled {
				out.err, out.set = err, true
			} else {
				p.lockOutcome(ctx, nil, "failed_open", start, nil)
				items = append(items, &loadItem{key: k, failOpen: err})
			}
			done[k] = true
			continue
		}
		lk := &looks[i]
		e, f := lk.e, lk.f
		switch {
		case lk.err == nil && lk.lease == nil && f == cache.Fresh:
			p.fillL1(k, e, out.o)
			p.lockOutcome(ctx, nil, "waited", start, nil)
			out.o.res, out.err = fromEntry(&e, SourceWaited)
			out.set = true
		case lk.err == nil && lk.lease == nil:
			items = append(items, &loadItem{key: k})
		case lk.err == nil:
			p.lockOutcome(ctx, nil, "acquired", start, lk.lease)
			items = append(items, heldItem(k, lk))
		case errors.Is(lk.err, lock.ErrNotAcquired):
			continue
		default:
			if it := p.lookFailed(ctx, k, lk.err, out, start); it != nil {
				items = append(items, it)
			}
		}
		done[k] = true
	}
	p.loadBatch(ctx, items, load, outs)
	return slices.DeleteFunc(pending, func(k string) bool { return done[k] })
}
