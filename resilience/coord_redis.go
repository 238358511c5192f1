package resilience

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/lock"
	"github.com/herdguard/herdguard/telemetry"
)

// redisCoord is the coordination seam over Redis: its looks read the
// value and try the lock in one script (one round trip for a key; for a
// batch, batch scripts of many keys each, through the batcher), its commits and releases announce in the
// same round trip, and a batch's leases are extended together.
type redisCoord[V any] struct {
	p  *Pipeline[V]
	n  *lock.RedisNotifier
	rl *lock.Redis // nil without Lock
	// found says whether the looks of late found their value.
	found presence
}

// presence says whether the looks of late mostly found a fresh value, as
// on a pod that starts beside others that keep Redis warm: a saturating
// count that a look that found its value raises by one and one that did
// not lowers by presenceMiss. It climbs while more than three looks in
// four find their value and sinks to zero otherwise; a run of cold keys
// brings a full count below presenceOn within a dozen looks. At either
// end a look writes nothing.
type presence struct {
	_ [64]byte // a line of its own: every L2 look reads it
	n atomic.Int32
	_ [60]byte
}

const (
	presenceMax  = 64
	presenceOn   = presenceMax / 2
	presenceMiss = 3
)

// likely reports whether the looks of late mostly found their value.
func (c *presence) likely() bool { return c.n.Load() >= presenceOn }

// saw counts a look that found its value, or not.
func (c *presence) saw(found bool) {
	for {
		old := c.n.Load()
		n := old + 1
		if !found {
			n = old - presenceMiss
		}
		n = min(max(n, 0), presenceMax)
		if n == old || c.n.CompareAndSwap(old, n) {
			return
		}
	}
}

var _ coord[int] = (*redisCoord[int])(nil)

func (c *redisCoord[V]) read(ctx context.Context, key string) (cache.Entry[V], cache.Freshness, error) {
	return c.p.l2Get(ctx, key)
}

// lookOrLock runs the look script, with a client span; when the value
// most likely landed, a plain read, the cheapest command, comes first,
// and the script runs only if it finds no value w takes. The value most
// likely landed when the caller says so (likely), or, for a look that is
// not a refresh's, when most such looks of late found their value
// (c.found, which those looks keep): a pod with no copy of a key that
// other pods keep warm reads it with one HGET, while a run of cold keys
// soon goes straight to the script again.
func (c *redisCoord[V]) lookOrLock(ctx context.Context, key string, likely bool, w want) (look[V], error) {
	p := c.p
	counts := !likely && !w.refresh // an unbiased look: c.found counts it
	if likely || counts && c.found.likely() {
		e, f, err := p.l2Get(ctx, key)
		switch {
		case err != nil:
			return look[V]{}, err
		case w.takes(&e.Written, f):
			if counts {
				c.found.saw(true)
			}
			return look[V]{e: e, f: f}, nil
		}
		if counts {
			c.found.saw(false)
			counts = false // counted: the script below is not
		}
	}
	var sp trace.Span
	if p.tel.Tracing() {
		ctx, sp = p.tel.Start(ctx, telemetry.SpanL2, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(telemetry.DBSystemRedis, telemetry.DBOperationName.String("EVALSHA")))
		defer sp.End()
	}
	var raw []byte
	lease, err := guard(ctx, p.redisGuard, func(ctx context.Context) (*lock.Lease, error) {
		l, v, _, err := c.rl.TryAcquireOrGet(ctx, key, p.lockCfg.Lease, time.Now())
		raw = v
		return l, err
	})
	lk := look[V]{lease: lease}
	if raw != nil {
		lk.e, lk.f = p.l2.Decode(key, raw)
	}
	if err == nil && lease == nil && !w.takes(&lk.e.Written, lk.f) {
		// Fresh by its expiry field, yet unusable (bytes that do not
		// decode: a miss), or for a refresh no newer than the copy that
		// called for it: take the lock without looking at it.
		lk.lease, err = p.tryAcquire(ctx, key)
		if err == nil && w.refresh {
			return c.recheck(ctx, key, lk, w)
		}
	}
	if counts && (err == nil || errors.Is(err, lock.ErrNotAcquired)) {
		c.found.saw(err == nil && lk.lease == nil)
	}
	if sp != nil {
		sp.SetAttributes(telemetry.Hit.Bool(lk.f == cache.Fresh), telemetry.Freshness.String(lk.f.String()))
	}
	switch classify(ctx, err) {
	case errData:
		p.corrupt(ctx, sp, err)
	case errInfra, errRefused, errCanceled:
		p.failOpen(ctx, sp, "l2_get", err)
	}
	return lk, err
}

// recheck reads key again after a grant that followed a look whose value
// did not answer a refresh: another holder may have written a newer one
// in between, and then the lease goes back.
func (c *redisCoord[V]) recheck(ctx context.Context, key string, lk look[V], w want) (look[V], error) {
	e, f, err := c.p.l2Get(ctx, key)
	switch {
	case err != nil && ctx.Err() != nil:
		// The caller left: the look ends with it, and grants nothing.
		c.p.release(ctx, key, lk.lease)
		return look[V]{e: lk.e, f: lk.f}, err
	case err != nil:
		lk.readFailed = err
	case w.takes(&e.Written, f):
		c.p.release(ctx, key, lk.lease)
		return look[V]{e: e, f: f}, nil
	}
	return lk, nil
}

// lookOrLockMany runs the batch look script (up to rscript.MaxKeys keys a
// run, rscript.Wave runs a round trip), with one client span.
func (c *redisCoord[V]) lookOrLockMany(ctx context.Context, keys []string) ([]look[V], error) {
	p := c.p
	var sp trace.Span
	if p.tel.Tracing() {
		ctx, sp = p.tel.Start(ctx, telemetry.SpanL2, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(telemetry.DBSystemRedis, telemetry.DBOperationName.String("EVALSHA"), attrKeys.Int(len(keys))))
		defer sp.End()
	}
	ls, err := guard(ctx, p.redisGuard, func(ctx context.Context) ([]lock.Look, error) {
		ls := c.rl.TryAcquireOrGetMany(ctx, keys, p.lockCfg.Lease, time.Now())
		for _, l := range ls {
			if l.Err != nil && !errors.Is(l.Err, lock.ErrNotAcquired) && classify(ctx, l.Err) != errData {
				return ls, l.Err
			}
		}
		return ls, nil
	})
	if err != nil {
		// A look that failed as a whole grants nothing: give back what
		// it may have granted.
		var granted []*lock.Lease
		for _, l := range ls {
			if l.Lease != nil {
				granted = append(granted, l.Lease)
			}
		}
		p.releaseMany(ctx, granted)
		if classify(ctx, err) != errCanceled {
			p.failOpen(ctx, sp, "l2_get", err)
		}
		return nil, err
	}
	looks := make([]look[V], len(ls))
	hits := 0
	for i, l := range ls {
		lk := look[V]{lease: l.Lease, err: l.Err}
		lk.e, lk.f = p.l2.Decode(keys[i], l.Value)
		if l.Fresh {
			hits++
		}
		looks[i] = lk
	}
	if sp != nil {
		sp.SetAttributes(attribute.Int("herdguard.keys.hit", hits))
	}
	return looks, nil
}

func (c *redisCoord[V]) commit(ctx context.Context, key string, e cache.Entry[V], token string) (bool, error) {
	return c.p.l2.Commit(ctx, key, e, token)
}

func (c *redisCoord[V]) commitMany(ctx context.Context, writes []rcache.Write[V]) ([]rcache.Written, error) {
	return c.p.l2.SetMany(ctx, writes)
}

func (c *redisCoord[V]) extendMany(ctx context.Context, leases []*lock.Lease) ([]bool, error) {
	return c.rl.ExtendMany(ctx, leases)
}

// release gives the lease back; the Redis lock announces in the same
// round trip.
func (c *redisCoord[V]) release(ctx context.Context, _ string, lease *lock.Lease) {
	_ = lease.Release(ctx)
}

func (c *redisCoord[V]) releaseMany(ctx context.Context, leases []*lock.Lease) {
	_ = c.rl.ReleaseMany(ctx, leases)
}

func (c *redisCoord[V]) mark() uint64 { return c.n.Mark() }

func (c *redisCoord[V]) subscribe(key string, mark uint64) (<-chan struct{}, func(), bool) {
	return subscribeSince(c.n, key, mark)
}

func (c *redisCoord[V]) subscribed() bool { return c.n.Subscribed() }

func (c *redisCoord[V]) check(ctx context.Context) error { return c.p.checkRedis(ctx) }

func (c *redisCoord[V]) l2Attrs(redisOp, _ string, more ...attribute.KeyValue) []attribute.KeyValue {
	return append([]attribute.KeyValue{telemetry.DBSystemRedis, telemetry.DBOperationName.String(redisOp)}, more...)
}

func (c *redisCoord[V]) failReason() string { return "redis_error" }
