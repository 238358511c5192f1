package resilience

import (
	"errors"
	"time"

	"github.com/herdguard/herdguard/internal/coord"
	"github.com/herdguard/herdguard/internal/settings"
)

// releaseTimeout bounds a release, which never goes through the breaker:
// a lock left behind holds other processes until they see its holder
// dead, so it is tried even while the breaker is open, and given time.
const releaseTimeout = 5 * time.Second

// wireDefaults are the defaults of the Redis and backend options
// (settings.go) as package coord takes them.
var wireDefaults = coord.Defaults{
	Prefix: DefaultPrefix, RedisTimeout: DefaultRedisTimeout, BackendTimeout: DefaultBackendTimeout,
	OpenTimeout: DefaultRedisOpenTimeout, FailureRatio: DefaultRedisFailureRatio,
}

// wire wires the pipeline to its Redis or its Backend (coord.Wire): the
// L2, the notifier (whose announcements keep L1 coherent: see
// writeHooks), with Lock the lock, the guard (breaker and operation
// timeout) around them, and the seam; or, with Lock alone, the embedded
// default (coord.WireMemory). It keeps what it built. A setting that the
// wiring refused comes back as a [*ConfigError] naming the field; any
// other error as it is.
func (p *Pipeline[V]) wire(c config[V]) error {
	var w *coord.Wired[V]
	switch {
	case c.redis != nil || c.backend != nil:
		p.writes.origin = newOrigin()
		r, b := c.redisOpts, c.backendOpts
		o := coord.Options{
			Client: c.redis, Backend: c.backend, Namespace: c.name, Defaults: wireDefaults,
			Prefix: r.Prefix, Codec: r.Codec, Encrypt: r.Encrypt, OpTimeout: r.OpTimeout,
			Breaker: r.SharedBreaker, BreakerSettings: r.Breaker, BreakerName: "redis", BreakerField: "RedisOptions",
			Lock: c.lockOn, Heartbeat: lockDefaults(c.lock).Heartbeat,
			OnCorrupt: p.tel.Undecodable, Hooks: p.writeHooks(), OnBreaker: p.breakerObserver(nil, c.onBreaker),
		}
		if c.backend != nil {
			o.Codec, o.Encrypt, o.OpTimeout = b.Codec, b.Encrypt, b.OpTimeout
			o.Breaker, o.BreakerSettings, o.BreakerName, o.BreakerField = b.SharedBreaker, b.Breaker, "backend", "BackendOptions"
		}
		var err error
		if w, err = coord.Wire(o, p.deps()); err != nil {
			var se *coord.SettingError
			if errors.As(err, &se) {
				return &ConfigError{Pipeline: c.name, Field: se.Field, Problem: se.Problem}
			}
			return err
		}
	case c.lockOn:
		w = coord.WireMemory(p.deps(), p.l1)
	default:
		return nil
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

// isNil reports whether v is nil or holds a nil pointer (see
// settings.IsNil).
var isNil = settings.IsNil
