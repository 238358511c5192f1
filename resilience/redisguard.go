package resilience

import (
	"reflect"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/internal/coord"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/internal/redisbatch"
	"github.com/herdguard/herdguard/internal/rlock"
	"github.com/herdguard/herdguard/internal/slotreload"
)

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
	p.redisGuard = &coord.Guard{Breaker: br, OpTimeout: o.OpTimeout, Slots: slotreload.New(c.redis)}
	// The cache and the lock send their commands through one batcher,
	// whose own timeout is the operation timeout: coord.Do leaves it to the
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
	n, err := rlock.NewRedisNotifier(c.redis, rlock.RedisOptions{Prefix: o.Prefix, Namespace: c.name})
	if err != nil {
		return &ConfigError{Pipeline: c.name, Field: "Redis", Problem: err.Error()}
	}
	p.watchWrites(n)
	p.notifier = n
	p.closers = append(p.closers, n.Close)
	var rl *rlock.Redis // nil without Lock
	if c.lockOn {
		ls := lockDefaults(c.lock)
		lk, err := rlock.NewRedis(batch, rlock.RedisOptions{Prefix: o.Prefix, Namespace: c.name, Heartbeat: ls.Heartbeat, Announce: true, Cluster: cluster})
		if err != nil {
			return &ConfigError{Pipeline: c.name, Field: "Lock", Problem: err.Error()}
		}
		p.locker, rl = lk, lk
		p.closers = append(p.closers, func() error { lk.Wait(); return nil })
	}
	d := p.deps()
	d.Check = coord.CheckRedis(c.redis, o.Prefix, c.name, c.lockOn)
	p.co = coord.NewRedis(d, n, rl)
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
