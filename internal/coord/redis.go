package coord

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/presence"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/internal/rlock"
	"github.com/herdguard/herdguard/telemetry"
)

// redisCoord is the coordination seam over Redis: its looks read the
// value and try the lock in one script (one round trip for a key; for a
// batch, batch scripts of many keys each, through the batcher), its commits and releases announce in the
// same round trip, and a batch's leases are extended together.
type redisCoord[V any] struct {
	d  Deps[V]
	n  *rlock.RedisNotifier
	rl *rlock.Redis // nil without Lock
	// found says whether the looks of late found their value.
	found presence.Count
}

var _ Coord[int] = (*redisCoord[int])(nil)

// NewRedis is the seam over Redis: n, the pipeline's notifier, and with
// Lock rl, the Redis lock (d.Locker too); d.Check is the ACL probes.
func NewRedis[V any](d Deps[V], n *rlock.RedisNotifier, rl *rlock.Redis) Coord[V] {
	return &redisCoord[V]{d: d, n: n, rl: rl}
}

func (c *redisCoord[V]) Read(ctx context.Context, key string) (rcache.Entry[V], cache.Freshness, error) {
	return c.d.readL2(ctx, c, key)
}

func (c *redisCoord[V]) ReadMany(ctx context.Context, keys []string) ([]Look[V], error) {
	return c.d.readL2Many(ctx, c, keys)
}

// LookOrLock runs the look script, with a client span; when the value
// most likely landed, a plain read, the cheapest command, comes first,
// and the script runs only if it finds no value w takes. The value most
// likely landed when the caller says so (likely), or, for a look that is
// not a refresh's, when most such looks of late found their value
// (c.found, which those looks keep): a pod with no copy of a key that
// other pods keep warm reads it with one HGET, while a run of cold keys
// soon goes straight to the script again.
func (c *redisCoord[V]) LookOrLock(ctx context.Context, key string, likely bool, w Want) (Look[V], error) {
	d := &c.d
	counts := !likely && !w.Refresh // an unbiased look: c.found counts it
	if likely || counts && c.found.Likely() {
		e, f, err := c.Read(ctx, key)
		switch {
		case err != nil:
			return Look[V]{}, err
		case w.Takes(&e.Written, f):
			if counts {
				c.found.Saw(true)
			}
			return Look[V]{E: e, F: f}, nil
		}
		if counts {
			c.found.Saw(false)
			counts = false // counted: the script below is not
		}
	}
	var sp trace.Span
	if d.Tel.Tracing() {
		ctx, sp = d.Tel.Start(ctx, telemetry.SpanL2, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(telemetry.DBSystemRedis, telemetry.DBOperationName.String("EVALSHA")))
		defer sp.End()
	}
	var raw []byte
	lease, err := Do(ctx, d.Guard, func(ctx context.Context) (*backend.Lease, error) {
		l, v, _, err := c.rl.TryAcquireOrGet(ctx, key, d.Lease, time.Now())
		raw = v
		return l, err
	})
	lk := Look[V]{Lease: lease}
	if raw != nil {
		lk.E, lk.F = d.Store.Decode(key, raw)
	}
	if err == nil && lease == nil && !w.Takes(&lk.E.Written, lk.F) {
		// Fresh by its expiry field, yet unusable (bytes that do not
		// decode: a miss), or for a refresh no newer than the copy that
		// called for it: take the lock without looking at it.
		lk.Lease, err = d.tryAcquire(ctx, key)
		if err == nil && w.Refresh {
			return c.recheck(ctx, key, lk, w)
		}
	}
	if counts && (err == nil || errors.Is(err, backend.ErrNotAcquired)) {
		c.found.Saw(err == nil && lk.Lease == nil)
	}
	if sp != nil {
		sp.SetAttributes(telemetry.Hit.Bool(lk.F == cache.Fresh), telemetry.Freshness.String(lk.F.String()))
	}
	switch Classify(ctx, err) {
	case Data:
		d.Tel.CorruptEntry(ctx, sp)
	case Infra, Refused, Canceled:
		d.FailOpen(ctx, sp, "l2_get", err)
	}
	return lk, err
}

// recheck reads key again after a grant that followed a look whose value
// did not answer a refresh: another holder may have written a newer one
// in between, and then the lease goes back.
func (c *redisCoord[V]) recheck(ctx context.Context, key string, lk Look[V], w Want) (Look[V], error) {
	e, f, err := c.Read(ctx, key)
	switch {
	case err != nil && ctx.Err() != nil:
		// The caller left: the look ends with it, and grants nothing.
		c.d.Release(ctx, key, lk.Lease)
		return Look[V]{E: lk.E, F: lk.F}, err
	case err != nil:
		lk.ReadFailed = err
	case w.Takes(&e.Written, f):
		c.d.Release(ctx, key, lk.Lease)
		return Look[V]{E: e, F: f}, nil
	}
	return lk, nil
}

// LookOrLockMany runs the batch look script (up to rscript.MaxKeys keys a
// run, rscript.Wave runs a round trip), with one client span.
func (c *redisCoord[V]) LookOrLockMany(ctx context.Context, keys []string) ([]Look[V], error) {
	d := &c.d
	var sp trace.Span
	if d.Tel.Tracing() {
		ctx, sp = d.Tel.Start(ctx, telemetry.SpanL2, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(telemetry.DBSystemRedis, telemetry.DBOperationName.String("EVALSHA"), attrKeys.Int(len(keys))))
		defer sp.End()
	}
	var partly error
	ls, err := Do(ctx, d.Guard, func(ctx context.Context) ([]rlock.Look, error) {
		ls := c.rl.TryAcquireOrGetMany(ctx, keys, d.Lease, time.Now())
		var failed []error
		for _, l := range ls {
			if l.Err != nil && !errors.Is(l.Err, backend.ErrNotAcquired) && Classify(ctx, l.Err) != Data {
				failed = append(failed, l.Err)
			}
		}
		whole, part := BatchFailure(failed, len(ls))
		partly = part
		return ls, whole
	})
	if err != nil {
		// A look that failed as a whole grants nothing: give back what
		// it may have granted.
		var granted []*backend.Lease
		for _, l := range ls {
			if l.Lease != nil {
				granted = append(granted, l.Lease)
			}
		}
		d.ReleaseMany(ctx, granted)
		if Classify(ctx, err) != Canceled {
			d.FailOpen(ctx, sp, "l2_get", err)
		}
		return nil, err
	}
	if partly != nil && Classify(ctx, partly) != Canceled {
		// Its keys that Redis did not answer fail open alone, each with
		// its look's error.
		d.FailOpen(ctx, sp, "l2_get", partly)
	}
	looks := make([]Look[V], len(ls))
	hits := 0
	for i, l := range ls {
		lk := Look[V]{Lease: l.Lease, Err: l.Err}
		lk.E, lk.F = d.Store.Decode(keys[i], l.Value)
		if Classify(ctx, l.Err) == Data {
			d.Tel.CorruptEntry(ctx, sp) // a miss; the rest failed open above
		}
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

func (c *redisCoord[V]) Commit(ctx context.Context, key string, e rcache.Entry[V], token string) (bool, error) {
	return c.d.Store.Commit(ctx, key, e, token)
}

func (c *redisCoord[V]) CommitMany(ctx context.Context, writes []rcache.Write[V]) ([]rcache.Written, error) {
	return c.d.Store.SetMany(ctx, writes)
}

func (c *redisCoord[V]) ExtendMany(ctx context.Context, leases []*backend.Lease) ([]bool, error) {
	return c.rl.ExtendMany(ctx, leases)
}

// Release gives the lease back; the Redis lock announces in the same
// round trip.
func (c *redisCoord[V]) Release(ctx context.Context, _ string, lease *backend.Lease) {
	_ = lease.Release(ctx)
}

func (c *redisCoord[V]) ReleaseMany(ctx context.Context, leases []*backend.Lease) {
	_ = c.rl.ReleaseMany(ctx, leases)
}

func (c *redisCoord[V]) Mark() uint64 { return c.n.Mark() }

func (c *redisCoord[V]) Subscribe(key string, mark uint64) (<-chan struct{}, func(), bool) {
	return subscribeSince(c.n, key, mark)
}

func (c *redisCoord[V]) Subscribed() bool { return c.n.Subscribed() }

func (c *redisCoord[V]) Check(ctx context.Context) *Finding { return c.d.Check(ctx) }

func (c *redisCoord[V]) L2Attrs(redisOp, _ string, more ...attribute.KeyValue) []attribute.KeyValue {
	return append([]attribute.KeyValue{telemetry.DBSystemRedis, telemetry.DBOperationName.String(redisOp)}, more...)
}

func (c *redisCoord[V]) FailReason() string { return "redis_error" }
