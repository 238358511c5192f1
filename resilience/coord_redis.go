package resilience

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/opbudget"
	"github.com/herdguard/herdguard/internal/presence"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/internal/redisbatch"
	"github.com/herdguard/herdguard/internal/rlock"
	"github.com/herdguard/herdguard/internal/slotreload"
	"github.com/herdguard/herdguard/telemetry"
	"github.com/redis/go-redis/v9"
)

// redisCoord is the coordination seam over Redis: its looks read the
// value and try the lock in one script (one round trip for a key; for a
// batch, batch scripts of many keys each, through the batcher), its commits and releases announce in the
// same round trip, and a batch's leases are extended together.
type redisCoord[V any] struct {
	p  *Pipeline[V]
	n  *rlock.RedisNotifier
	rl *rlock.Redis // nil without Lock
	// found says whether the looks of late found their value.
	found presence.Count
}

var _ coord[int] = (*redisCoord[int])(nil)

func (c *redisCoord[V]) read(ctx context.Context, key string) (rcache.Entry[V], cache.Freshness, error) {
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
	if likely || counts && c.found.Likely() {
		e, f, err := p.l2Get(ctx, key)
		switch {
		case err != nil:
			return look[V]{}, err
		case w.takes(&e.Written, f):
			if counts {
				c.found.Saw(true)
			}
			return look[V]{e: e, f: f}, nil
		}
		if counts {
			c.found.Saw(false)
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
	lease, err := guard(ctx, p.redisGuard, func(ctx context.Context) (*backend.Lease, error) {
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
	if counts && (err == nil || errors.Is(err, backend.ErrNotAcquired)) {
		c.found.Saw(err == nil && lk.lease == nil)
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
	var partly error
	ls, err := guard(ctx, p.redisGuard, func(ctx context.Context) ([]rlock.Look, error) {
		ls := c.rl.TryAcquireOrGetMany(ctx, keys, p.lockCfg.Lease, time.Now())
		var failed []error
		for _, l := range ls {
			if l.Err != nil && !errors.Is(l.Err, backend.ErrNotAcquired) && classify(ctx, l.Err) != errData {
				failed = append(failed, l.Err)
			}
		}
		whole, part := batchFailure(failed, len(ls))
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
		p.releaseMany(ctx, granted)
		if classify(ctx, err) != errCanceled {
			p.failOpen(ctx, sp, "l2_get", err)
		}
		return nil, err
	}
	if partly != nil && classify(ctx, partly) != errCanceled {
		// Its keys that Redis did not answer fail open alone (lookFailed).
		p.failOpen(ctx, sp, "l2_get", partly)
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

func (c *redisCoord[V]) commit(ctx context.Context, key string, e rcache.Entry[V], token string) (bool, error) {
	return c.p.l2.Commit(ctx, key, e, token)
}

func (c *redisCoord[V]) commitMany(ctx context.Context, writes []rcache.Write[V]) ([]rcache.Written, error) {
	return c.p.l2.SetMany(ctx, writes)
}

func (c *redisCoord[V]) extendMany(ctx context.Context, leases []*backend.Lease) ([]bool, error) {
	return c.rl.ExtendMany(ctx, leases)
}

// release gives the lease back; the Redis lock announces in the same
// round trip.
func (c *redisCoord[V]) release(ctx context.Context, _ string, lease *backend.Lease) {
	_ = lease.Release(ctx)
}

func (c *redisCoord[V]) releaseMany(ctx context.Context, leases []*backend.Lease) {
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

// redisGuard bounds the pipeline's Redis operations: a breaker that opens
// on a failure rate, and the operation timeout, which the batcher that
// carries the commands (package internal/redisbatch) applies from when
// their round trip starts, so that it measures Redis and never the time a
// burst's commands spent waiting for their batch. Operations run on the caller's goroutine.
//
// The same guard bounds the operations on a [backend.Backend], whose calls carry
// no batcher: deadline says so, and each operation then runs under
// context.WithTimeout(opTimeout).
type redisGuard struct {
	br        *breaker.Breaker
	opTimeout time.Duration
	deadline  bool
	check     checkTarget          // what Check looks at
	slots     *slotreload.Reloader // a Cluster client's slot map reload; nil otherwise
}

// guard runs one Redis operation through g. A nil g (the embedded
// default, no Redis) runs op as it is. The operation's error is classified
// once, by [classify]: only infrastructure failures count against the
// breaker; a per-key data problem or a caller's cancellation does not.
func guard[T any](ctx context.Context, g *redisGuard, op func(context.Context) (T, error)) (T, error) {
	if g == nil {
		return op(ctx)
	}
	var v T
	var err error
	ran := false
	refused := g.br.Execute(func() error {
		ran = true
		if g.deadline {
			// The deadline bounds any backend as it is; one that counts
			// the timeout from when its request is sent, not while it
			// waits for its own pool, takes the caller's context and
			// the timeout back with backend.Budget.
			bctx := opbudget.With(ctx, ctx, g.opTimeout)
			octx, cancel := context.WithTimeout(bctx, g.opTimeout)
			v, err = op(octx)
			cancel()
		} else if _, ok := ctx.Deadline(); ok {
			// The timeout travels with the command into its batch (see
			// batcher), which starts counting it when the round trip
			// does, in place of what is left of ctx's deadline.
			v, err = op(redisbatch.WithBudget(ctx, &g.opTimeout))
		} else {
			// Without a deadline, the batcher gives the command its own
			// timeout, which is the operation timeout.
			v, err = op(ctx)
		}
		switch classify(ctx, err) {
		case errInfra:
			g.slots.Failed()
			return err
		case errCanceled:
			return breaker.Ignore
		}
		return nil // a reply: Redis answered
	})
	if !ran {
		g.slots.Failed()
		var zero T
		return zero, refused
	}
	return v, err
}

// errClass is what an error means to the pipeline; [classify] decides it,
// in one place, for every error a stage meets.
type errClass uint8

const (
	// errNone: no error, or an answer rather than a failure (another
	// holder has the lock, a write refused by a newer fence, a lease found
	// lost).
	errNone errClass = iota
	// errCanceled: the caller's (or the shared load's) own context ended.
	// Counts nowhere.
	errCanceled
	// errData: a problem with one key's data: bytes or types that this
	// package did not write, a value the codec cannot encode, an error
	// reply about one key. The key is treated as a miss and counted; the
	// Redis breaker never hears of it, so one bad key cannot make every
	// other key fail open.
	errData
	// errInfra: Redis or the path to it failed (connection refused or
	// broken, no reply in time, a server not ready to serve). Counts
	// against the Redis breaker; the call fails open.
	errInfra
	// errRefused: the Redis breaker is open; the operation did not run.
	errRefused
)

// infraReplies are the Redis error replies that say the server, not the
// key, is in trouble.
var infraReplies = []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY",
	"NOAUTH", "NOPERM", "WRONGPASS", "OOM", "MISCONF", "NOREPLICAS", "UNBLOCKED", "ERR max number of clients"}

// classify decides what err from a Redis operation run under ctx means.
// Loader errors are not classified here: they go to the loader's breaker
// and the fallback chain (see [Builder.IsFailure]).
func classify(ctx context.Context, err error) errClass {
	switch {
	case err == nil, errors.Is(err, backend.ErrNotAcquired), errors.Is(err, backend.ErrNotHeld),
		errors.Is(err, cache.ErrExpiredEntry), errors.Is(err, backend.ErrLockLost):
		return errNone
	case isBreakerRefusal(err):
		return errRefused
	case ctx.Err() != nil:
		return errCanceled
	case errors.Is(err, cache.ErrCodec):
		return errData
	}
	return classifyReply(err)
}

// classifyReply is classify for an error that may be a Redis error reply;
// apart, so that the call without an error allocates nothing.
func classifyReply(err error) errClass {
	var re redis.Error
	if errors.As(err, &re) && !errors.Is(err, redis.ErrClosed) {
		if isDenied(err) { // the ACL refused a command inside a script
			return errInfra
		}
		for _, prefix := range infraReplies {
			if redis.HasErrorPrefix(re, prefix) {
				return errInfra
			}
		}
		return errData
	}
	return errInfra
}

// watchWrites makes the pipeline's subscription drop L1 entries that other
// processes Set or Invalidate, and every L1 entry whenever the
// subscription is (re-)established: announcements published while it was
// down are lost.
func (p *Pipeline[V]) watchWrites(n *rlock.RedisNotifier) {
	p.writes.origin = newOrigin()
	n.SetHooks(rlock.NotifierHooks{
		OnWrite: func(w rlock.Write) {
			if w.Origin != p.writes.origin {
				p.dropLocal(w.Key)
			}
		},
		OnSubscribed: func(n int) {
			// The first confirmation ends the start-up window (see
			// Invalidate); the ones after it follow a lost connection.
			if n > 1 {
				p.dropAllLocal()
				p.writes.resubscribed.Add(1)
			}
		},
	})
}
