package resilience

import (
	"context"
	"errors"
	"time"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/lock"
	"go.opentelemetry.io/otel/trace"
)

// pending is what a look found that calls for a load, or a wait: the rest
// of a miss, which fetchLoad runs.
type pending[V any] struct {
	// relook: the caller's context ended during the look; the rest starts
	// with a look of its own.
	relook bool
	// mark is the notifier's, taken before the look: a subscription
	// after it misses no announcement since.
	mark uint64
	// locked: lk and err are a look through the lock (lookOrLock),
	// which began at start.
	locked bool
	start  time.Time
	lk     look[V]
	err    error
	// g is the grant of lk's lease once its watchdog beats.
	g *grant
}

// fetchAlone is a miss without the single-flight: the look, then the
// load, on the caller's goroutine and context.
func (p *Pipeline[V]) fetchAlone(ctx context.Context, key string, load LoadFunc[V], o *outcome[V], hint bool) error {
	pd, finished, err := p.fetchLook(ctx, key, load, o, hint)
	if finished {
		return err
	}
	if !p.bg.add() { // Close waits for loads
		if pd.lk.lease != nil {
			p.release(ctx, key, pd.lk.lease)
		}
		return ErrClosed
	}
	defer p.bg.done()
	return p.fetchLoad(ctx, key, load, o, &pd)
}

// fetchInto is the whole shared part of a miss, into o: L2, then the
// lock, then the loader (for a background refresh).
func (p *Pipeline[V]) fetchInto(ctx context.Context, key string, load LoadFunc[V], o *outcome[V]) error {
	pd, finished, err := p.fetchLook(ctx, key, load, o, false)
	if finished {
		return err
	}
	return p.fetchLoad(ctx, key, load, o, &pd)
}

// fetchLook is the part of a miss that may answer without a load: L1
// again, then one look at L2 (with Lock, one that also tries the lock). finished says it answered, into o, with
// err; otherwise pd holds what the rest of the miss needs. A panic of user
// code that escaped its own stage's recovery becomes a [*PanicError].
func (p *Pipeline[V]) fetchLook(ctx context.Context, key string, load LoadFunc[V], o *outcome[V], hint bool) (pd pending[V], finished bool, err error) {
	// Not recoverPanic: a panic must also finish the look and drop pd.
	defer func() {
		if v := recover(); v != nil {
			pd, finished, err = pending[V]{}, true, panicked("pipeline", v)
		}
	}()
	// Writes (Set, Invalidate) from now on keep this load's value out of
	// L1.
	o.gen = p.writes.gens.stamp()
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		o.leadSpan = sc
	}
	if p.locker != nil {
		// Announcements delivered from now on reach the subscription that
		// a wait takes after the looks below, however late (see
		// subscribe): a look that finds the value needs none.
		pd.mark = p.co.mark()
	}
	if p.l1 != nil && !o.refresh {
		// A caller that missed L1 just before the previous shared load
		// filled it may lead a new one after that one ended: look again.
		if h, f := p.l1.Find(key); f == cache.Fresh {
			o.res, err = fromHit(h)
			return pd, true, err
		}
	}
	if p.locker != nil && !p.swr {
		// hint: L1 says L2 has it fresh, so a plain read may answer.
		finished, err = p.lookLocked(ctx, key, o, &pd, hint)
		return pd, finished, err
	}
	if p.l2 != nil {
		e, f, err := p.l2Get(ctx, key)
		switch {
		case err != nil && ctx.Err() != nil:
			return pending[V]{relook: true}, false, nil
		case err != nil:
			o.failOpen(err)
		case o.accepts(&e, f):
			p.fillL1(key, e, o)
			o.res, err = fromEntry(&e, SourceL2)
			return pd, true, err
		case f == cache.Stale:
			o.stale, o.hasStale = e, true
			if p.swr && !e.NotFound && !o.refresh {
				p.fillL1(key, e, o)
				p.refreshAsync(ctx, key, load, e.Written)
				o.res = Result[V]{Value: e.Value, Source: SourceStale}
				return pd, true, nil
			}
		}
	}
	return pd, false, nil
}

// lookLocked is the look through the lock: one step reads the value and,
// if it does not answer o, tries the lock. finished says it answered,
// into o, with err; otherwise pd holds the look (or relook: the caller's
// context ended during it).
func (p *Pipeline[V]) lookLocked(ctx context.Context, key string, o *outcome[V], pd *pending[V], likely bool) (finished bool, err error) {
	pd.locked, pd.start = true, time.Now()
	pd.lk, pd.err = p.co.lookOrLock(ctx, key, likely, o)
	switch {
	case pd.err == nil && pd.lk.lease == nil: // a value: no lock needed
		p.fillL1(key, pd.lk.e, o)
		o.res, err = fromEntry(&pd.lk.e, SourceL2)
		return true, err
	case pd.err != nil && !errors.Is(pd.err, lock.ErrNotAcquired) && ctx.Err() != nil:
		*pd = pending[V]{relook: true}
		return false, nil
	}
	if pd.lk.f == cache.Stale {
		o.stale, o.hasStale = pd.lk.e, true
	}
	return false, nil
}

// l2Fresh reports whether e, an entry L1 holds past its L1 expiry, says
// that Redis still holds a fresh copy: L1 keeps an entry read from Redis
// no longer than L1TTL, but its stale-until is Redis's, so Redis's expiry
// is that less the grace. A plain read then answers; a key that may be
// cold goes straight to the look that also tries the lock.
func (p *Pipeline[V]) l2Fresh(e *cache.Entry[V]) bool {
	return !e.NotFound && e.StaleUntil.Add(-p.grace).After(time.Now())
}

// fetchLoad is the rest of a miss after fetchLook: the lock, then the
// loader, or the wait for another holder's value. A panic of user code
// that escaped its own stage's recovery becomes a [*PanicError].
func (p *Pipeline[V]) fetchLoad(ctx context.Context, key string, load LoadFunc[V], o *outcome[V], pd *pending[V]) (err error) {
	defer recoverPanic("pipeline", &err)
	if pd.relook {
		// The look was cut short by its caller's leaving: look again,
		// for those who stay.
		var finished bool
		*pd, finished, err = p.fetchLook(ctx, key, load, o, false)
		switch {
		case finished:
			return err
		case pd.relook:
			return ctx.Err()
		}
	}
	if !pd.locked && p.locker != nil && !o.res.FailedOpen {
		// After a plain read that found no value to serve (with
		// StaleWhileRevalidate): the look through the lock.
		finished, err := p.lookLocked(ctx, key, o, pd, false)
		switch {
		case finished:
			return err
		case pd.relook:
			return ctx.Err()
		}
	}
	if pd.locked {
		return p.lockedRest(ctx, key, load, o, pd)
	}
	return p.loadAndStore(ctx, key, load, nil, o)
}
