package resilience

import (
	"errors"
	"reflect"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/internal/coord"
)

// releaseTimeout bounds a release, which never goes through the breaker:
// a lock left behind holds other processes until they see its holder
// dead, so it is tried even while the breaker is open, and given time.
const releaseTimeout = 5 * time.Second

// wireRedis wires the pipeline to its Redis (coord.WireRedis): the Redis
// cache, the notifier (which also keeps L1 coherent: see writeHooks),
// with Lock the Redis lock, the guard around them, and the seam.
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
	return p.wire(c, coord.WireRedis[V], coord.Options{
		Client: c.redis, Prefix: o.Prefix, Codec: o.Codec, Encrypt: o.Encrypt, OpTimeout: o.OpTimeout, Breaker: br,
	})
}

// wireBackend wires the pipeline to its Backend (coord.WireBackend): it
// opens the pipeline's view and makes it the L2, the notifier, and with
// Lock the lock, behind the guard (breaker and operation timeout) the
// Redis stages have; and it makes the backend's announcements keep L1
// coherent, as Redis's do (see writeHooks).
func (p *Pipeline[V]) wireBackend(c config[V]) error {
	o := c.backendOpts
	if o.OpTimeout == 0 {
		o.OpTimeout = DefaultBackendTimeout
	}
	br, err := p.infraBreaker(c, o.SharedBreaker, o.Breaker, "backend", "BackendOptions")
	if err != nil {
		return err
	}
	return p.wire(c, coord.WireBackend[V], coord.Options{
		Backend: c.backend, Codec: o.Codec, Encrypt: o.Encrypt, OpTimeout: o.OpTimeout, Breaker: br,
	})
}

// wire builds the service with build (coord.WireRedis or
// coord.WireBackend) from o and what the pipeline brings (its name, its
// lock, its hooks, its stages' steps), and keeps what it built. A setting
// that the wiring refused comes back as a [*ConfigError] naming the field;
// any other error as it is.
func (p *Pipeline[V]) wire(c config[V], build func(coord.Options, coord.Deps[V]) (*coord.Wired[V], error), o coord.Options) error {
	p.writes.origin = newOrigin()
	o.Namespace, o.Lock, o.Heartbeat = c.name, c.lockOn, lockDefaults(c.lock).Heartbeat
	o.OnCorrupt, o.Hooks = p.tel.Undecodable, p.writeHooks()
	w, err := build(o, p.deps())
	if err != nil {
		var se *coord.SettingError
		if errors.As(err, &se) {
			return &ConfigError{Pipeline: c.name, Field: se.Field, Problem: se.Problem}
		}
		return err
	}
	p.redisGuard, p.l2, p.notifier, p.locker, p.co = w.Guard, w.L2, w.Notifier, w.Locker, w.Coord
	p.closers = append(p.closers, w.Closers...)
	return nil
}

// writeHooks makes the pipeline's subscription drop L1 entries that other
// processes Set or Invalidate, and every L1 entry whenever the
// subscription is re-established: announcements published while it was
// down are lost.
func (p *Pipeline[V]) writeHooks() coord.Hooks {
	return coord.Hooks{
		OnWrite: func(key, origin string) {
			if origin != p.writes.origin {
				p.dropLocal(key)
			}
		},
		OnReset: func() {
			p.dropAllLocal()
			p.writes.resubscribed.Add(1)
		},
	}
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

// isNil reports whether v is nil or holds a nil pointer (a *redis.Client
// variable never assigned), which would crash the first call.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	r := reflect.ValueOf(v)
	return r.Kind() == reflect.Pointer && r.IsNil()
}
