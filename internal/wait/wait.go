// Package wait is the wait of a caller for the values of keys another
// holds locked, for one key or a batch's: the one loop (Loop), woken by
// the holders' announcements with a jittered backoff poll as the safety
// net, and the fan-in (FanIn) that passes a batch's announcements on one
// channel. The looks themselves, and what their outcomes mean, are the
// caller's (package resilience's await and awaitMany).
package wait

import (
	"context"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Pace is how long a wait lasts and how often it polls: the pipeline's
// Lock settings, and when the wait began.
type Pace struct {
	// MaxWait bounds the wait for a live holder, from Start.
	MaxWait time.Duration
	// Poll is the first interval of the poll's backoff.
	Poll time.Duration
	// Start is when the wait began: the look that found the lock held.
	Start time.Time
}

// Sub is where a wait hears its keys' announcements: one key's own
// subscription (Woken), or, for a batch, the fan-in of its keys' (Heard,
// from FanIn). LookNow says the notifier keeps no marks: look once before
// waiting.
type Sub struct {
	Woken   <-chan struct{}
	Heard   <-chan string
	LookNow bool
}

// Looks is what a wait's looks do, for one key or a batch's.
type Looks struct {
	// Look looks at keys (announced: woken by an announcement), settles
	// those it can, loads those it must, and returns those a live holder
	// still holds.
	Look func(ctx context.Context, keys []string, announced bool) (held []string)
	// Spent loads keys, still held once MaxWait is spent, unlocked.
	Spent func(ctx context.Context, keys []string)
}

// Loop is the wait loop, for one key another holds or for a batch's keys:
// woken by the holders' announcements, with a jittered backoff poll of
// every key still waited for as the safety net. Each look (w.Look) reads
// the value and, if it is not there, tries the lock, which takes it over
// when the holder stopped beating: the first waiter to look then loads
// under a new grant, and the others keep waiting for its value. A live
// holder is waited for up to MaxWait; then the keys still waited for are
// loaded unlocked (w.Spent). After an announcement, which says the value
// most likely landed, the look starts with a plain read, and tries the
// lock only if that finds no fresh value.
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
// It keeps them in keys' own array: a caller that needs keys afterwards
// passes a copy.
func Loop(ctx context.Context, keys []string, sub Sub, pace Pace, w Looks) []string {
	bo := pollBackOff(pace.Poll)
	pending := keys
	var waiting map[string]bool // the keys of pending, for a fan-in's
	if sub.Heard != nil {
		waiting = make(map[string]bool, len(keys))
		for _, k := range keys {
			waiting[k] = true
		}
	}
	var quiet map[string]bool // keys heard again only after the next poll
	listened := func(k string) bool { return (waiting == nil || waiting[k]) && !quiet[k] }
	// Announced since the look: look again at once.
	due, announced := sub.drain(pending, listened), true
	if len(due) == 0 && sub.LookNow {
		due, announced = pending, false
	}
	for len(pending) > 0 {
		if len(due) > 0 {
			still := w.Look(ctx, due, announced)
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
		left := pace.MaxWait - time.Since(pace.Start)
		if left <= 0 {
			w.Spent(ctx, pending)
			return nil
		}
		// One key's subscription, quiet after a false announcement: the
		// next wake-up is the poll's.
		woken := sub.Woken
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
		case k := <-sub.Heard:
			due = drainHeard(sub.Heard, k, listened)
		}
		t.Stop()
	}
	if ctx.Err() != nil {
		return pending
	}
	return nil
}

// drain returns the keys of pending announced now that keep accepts.
func (s Sub) drain(pending []string, keep func(string) bool) []string {
	if s.Heard != nil {
		return drainHeard(s.Heard, "", keep)
	}
	select {
	case <-s.Woken:
		if keep(pending[0]) {
			return pending
		}
	default:
	}
	return nil
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

// pollBackOff paces the looks of a caller waiting for a key (or keys)
// another holds locked: from poll, growing 1.5 times, jittered, up to a
// second. MaxWait bounds the wait, not the backoff.
func pollBackOff(poll time.Duration) *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(poll),
		backoff.WithMultiplier(1.5),
		backoff.WithRandomizationFactor(0.5),
		backoff.WithMaxInterval(time.Second),
		backoff.WithMaxElapsedTime(0),
	)
}
