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

// wire wires the pipeline to its Redis or its Backend (coord.Wire, which
// fills the zero options with their defaults): the L2, the notifier
// (whose announcements keep L1 coherent: see writeHooks), with Lock the
// lock, the guard (breaker and operation timeout) around them, and the
// seam; or, with Lock alone, the embedded default (coord.WireMemory). It
// keeps what it built. A setting that the wiring refused comes back as a
// [*ConfigError] naming the field; any other error as it is.
func (p *Pipeline[V]) wire(c config[V]) error {
	var w *coord.Wired[V]
	switch {
	case c.redis != nil || c.backend != nil:
		p.writes.origin = newOrigin()
		// What package coord takes of the Redis or the backend options.
		r, b := c.redisOpts, c.backendOpts
		o := coord.Options{Prefix: r.Prefix, Codec: r.Codec, Encrypt: r.Encrypt,
			OpTimeout: r.OpTimeout, Breaker: r.SharedBreaker, BreakerSettings: r.Breaker}
		if c.backend != nil {
			o = coord.Options{Codec: b.Codec, Encrypt: b.Encrypt,
				OpTimeout: b.OpTimeout, Breaker: b.SharedBreaker, BreakerSettings: b.Breaker}
		}
		o.Client, o.Backend, o.Namespace = c.redis, c.backend, c.name
		o.Lock, o.Heartbeat = c.lockOn, lockDefaults(c.lock).Heartbeat
		o.OnCorrupt, o.Hooks = p.tel.Undecodable, p.writeHooks()
		o.OnBreaker = p.breakerObserver(nil, c.onBreaker)
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
