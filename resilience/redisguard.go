package resilience

import (
	"context"
	"reflect"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/internal/redisbatch"
	"github.com/herdguard/herdguard/internal/slotreload"
	"github.com/herdguard/herdguard/lock"
)

// redisGuard bounds the pipeline's Redis operations: a breaker that opens
// on a failure rate, and the operation timeout, which the batcher that
// carries the commands (package internal/redisbatch) applies from when
// their round trip starts, so that it measures Redis and never the time a
// burst's commands spent waiting for their batch. Operations run on the caller's goroutine.
//
// The same guard bounds the operations on a [Backend], whose calls carry
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
			// the timeout back with BackendBudget.
			bctx := context.WithValue(ctx, backendBudgetKey{}, &backendBudget{caller: ctx, timeout: g.opTimeout})
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

// releaseTimeout bounds a release, which never goes through the breaker:
// a lock left behind holds other processes until they see its holder
// dead, so it is tried even while the breaker is open, and given time.
const releaseTimeout = 5 * time.Second

// wireRedis builds the Redis cache, the notifier (which also keeps L1
// coherent: see watchWrites), with Lock the Redis lock, and the guard
// around them.
func (p *Pipeline[V]) wireRedis(c config[V]) error {
	o := c.redisOpts
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.OpTimeout == 0 {
		o.OpTimeout = DefaultRedisTimeout
	}
	br, err := p.infraBreaker(c, o.SharedBreaker, o.Breaker, "redis", "RedisOptions")
	if err != nil {
		return err
	}
	p.redisGuard = &redisGuard{br: br, opTimeout: o.OpTimeout, slots: slotreload.New(c.redis),
		check: checkTarget{client: c.redis, prefix: o.Prefix, lock: c.lockOn}}
	// The cache and the lock send their commands through one batcher,
	// whose own timeout is the operation timeout: guard leaves it to the
	// batcher when the caller's context has no deadline.
	// Behind the batcher, the cache and the lock do not see a Cluster
	// client: they are told, so that each batch script carries the keys
	// of one hash slot.
	batch := redisbatch.New(c.redis, o.OpTimeout)
	_, cluster := c.redis.(*redis.ClusterClient)
	l2, err := rcache.NewRedis[V](batch, rcache.RedisOptions{
		Prefix: o.Prefix, Namespace: c.name, Codec: o.Codec, Encrypt: o.Encrypt,
		OnCorrupt: p.l2Corrupt, Cluster: cluster,
	})
	if err != nil {
		return &ConfigError{Pipeline: c.name, Field: "Redis", Problem: err.Error()}
	}
	p.l2 = l2
	n, err := lock.NewRedisNotifier(c.redis, lock.RedisOptions{Prefix: o.Prefix, Namespace: c.name})
	if err != nil {
		return &ConfigError{Pipeline: c.name, Field: "Redis", Problem: err.Error()}
	}
	p.watchWrites(n)
	p.notifier = n
	rc := &redisCoord[V]{p: p, n: n}
	p.co = rc
	p.closers = append(p.closers, n.Close)
	if !c.lockOn {
		return nil
	}
	ls := lockDefaults(c.lock)
	lk, err := lock.NewRedis(batch, lock.RedisOptions{Prefix: o.Prefix, Namespace: c.name, Heartbeat: ls.Heartbeat, Announce: true, Cluster: cluster})
	if err != nil {
		return &ConfigError{Pipeline: c.name, Field: "Lock", Problem: err.Error()}
	}
	p.locker, rc.rl = lk, lk
	p.closers = append(p.closers, func() error { lk.Wait(); return nil })
	return nil
}

// infraBreaker is the breaker around Redis or a backend: shared, or the
// pipeline's own, built from bs with the Redis defaults and named name
// unless bs names it. The pipeline hears its transitions whether it owns
// it or shares it, and stops hearing them when it closes.
func (p *Pipeline[V]) infraBreaker(c config[V], shared *breaker.Breaker, bs breaker.Settings, name, field string) (*breaker.Breaker, error) {
	br := shared
	if br == nil {
		if bs.Name == "" {
			bs.Name = name
		}
		if bs.OpenTimeout == 0 {
			bs.OpenTimeout = DefaultRedisOpenTimeout
		}
		if bs.Failures == 0 && bs.FailureRatio == 0 {
			bs.FailureRatio = DefaultRedisFailureRatio
		}
		var err error
		if br, err = breaker.New(bs); err != nil {
			return nil, &ConfigError{Pipeline: c.name, Field: field, Problem: err.Error()}
		}
	}
	unsubscribe := br.Subscribe(p.breakerObserver(nil, c.onBreaker))
	p.closers = append(p.closers, func() error { unsubscribe(); return nil })
	return br, nil
}

// isNilClient reports whether client is nil or a typed nil pointer (a
// *redis.Client variable never assigned), which would crash the first call.
func isNilClient(client redis.UniversalClient) bool { return isNil(client) }

// isNil reports whether v is nil or holds a nil pointer.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	r := reflect.ValueOf(v)
	return r.Kind() == reflect.Pointer && r.IsNil()
}
