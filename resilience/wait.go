package resilience

import (
	"context"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/internal/coord"
	"github.com/herdguard/herdguard/internal/counts"
	"github.com/herdguard/herdguard/internal/wait"
	"github.com/herdguard/herdguard/telemetry"
)

// The wait for a key another holds, and for many keys at once, in one
// loop (package internal/wait's Loop, whose comment tells how it is woken
// and paced): woken by the holders' announcements, with a jittered
// backoff poll as the safety net; each look goes through the seam's look
// that also tries the lock.

// await is a waiter's part for one key: the wait loop over one key, on
// the key's own subscription (no fan-in). mark is the notifier's, taken
// before the look that found the lock held: an announcement delivered
// since then signals the subscription at once, so looks that find the
// value never subscribe, and a wait loses no wake-up (lookNow: the
// notifier keeps no marks, look once before waiting).
func (p *Pipeline[V]) await(ctx context.Context, sp trace.Span, key string, load LoadFunc[V], o *outcome[V], start time.Time, mark uint64) (err error) {
	woken, unsubscribe, lookNow := p.co.Subscribe(key, mark)
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
		k := p.sortLook(ctx, sp, &lk, lerr, start, true)
		if k == lookHeld {
			return keys
		}
		err = p.keyLook(ctx, key, load, o, k, &lk, lerr, SourceWaited)
		return nil
	}
	spent := func(ctx context.Context, _ []string) {
		p.tel.LockOutcome(ctx, sp, "timeout", start, nil)
		if wsp != nil {
			wsp.AddEvent("MaxWait spent while the holder lives; loading unlocked")
		}
		p.duplicates(ctx, counts.MaxWait, 1)
		err = p.loadAndStore(ctx, key, load, nil, o)
	}
	if left := wait.Loop(ctx, keys, wait.Sub{Woken: woken, LookNow: lookNow}, p.waitPace(start), wait.Looks{Look: look, Spent: spent}); len(left) > 0 {
		return ctx.Err()
	}
	return err
}

// awaitMany is the waiters' part for a batch's keys, in one wait: the
// wait loop over the keys, on the fan-in of their subscriptions. The keys
// that come due together are looked at in one round trip (lookAgain), and
// loaded in one loader call.
func (p *Pipeline[V]) awaitMany(ctx context.Context, keys []string, subs map[string]<-chan struct{}, load LoadManyFunc[V], outs map[string]*keyOut[V], start time.Time) {
	heard, stop := wait.FanIn(keys, subs)
	defer stop()
	look := func(ctx context.Context, due []string, _ bool) []string {
		return p.lookAgain(ctx, due, load, outs, start)
	}
	spent := func(ctx context.Context, pending []string) {
		items := make([]*loadItem, len(pending))
		for i, k := range pending {
			p.tel.LockOutcome(ctx, nil, "timeout", start, nil)
			items[i] = &loadItem{key: k}
		}
		p.duplicates(ctx, counts.MaxWait, len(items))
		p.loadBatch(ctx, items, load, outs)
	}
	left := wait.Loop(ctx, slices.Clone(keys), wait.Sub{Heard: heard}, p.waitPace(start), wait.Looks{Look: look, Spent: spent})
	for _, k := range left {
		out := outs[k]
		out.err, out.set = ctx.Err(), true
	}
}

// waitPace is how a wait that began at start lasts and polls: MaxWait
// and Poll of the Lock settings.
func (p *Pipeline[V]) waitPace(start time.Time) wait.Pace {
	return wait.Pace{MaxWait: p.lockCfg.MaxWait, Poll: p.lockCfg.Poll, Start: start}
}

// lookAgain looks at the woken keys in one round trip, settles those it
// can, loads those it must, and returns those a live holder still holds.
func (p *Pipeline[V]) lookAgain(ctx context.Context, woken []string, load LoadManyFunc[V], outs map[string]*keyOut[V], start time.Time) (held []string) {
	looks, err := p.co.LookOrLockMany(ctx, woken)
	if err != nil { // failed as a whole: each key's look failed so
		looks = make([]coord.Look[V], len(woken))
		for i := range looks {
			looks[i].Err = err
		}
	}
	items, held := p.sortLooks(ctx, woken, looks, outs, start, SourceWaited, false)
	p.loadBatch(ctx, items, load, outs)
	return held
}
