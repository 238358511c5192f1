package coord

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/internal/rcache/remote"
	"github.com/herdguard/herdguard/internal/redisbatch"
	"github.com/herdguard/herdguard/internal/rlock"
	"github.com/herdguard/herdguard/internal/slotreload"
	"github.com/herdguard/herdguard/keyring"
	"github.com/herdguard/herdguard/lock"
)

// Options is what [Wire] builds a pipeline's service from: the
// pipeline's settings, Redis's with Client or else a Backend's. [Wire]
// fills their zero settings with its defaults; [WireRedis] and
// [WireBackend] take them already filled.
type Options struct {
	// Client is the pipeline's Redis, for WireRedis: a single node,
	// Sentinel or Cluster client.
	Client redis.UniversalClient
	// Backend is the pipeline's backend, for WireBackend.
	Backend backend.Backend
	// Prefix starts every Redis key (WireRedis only).
	Prefix string
	// Namespace is the pipeline's name: it separates the pipeline's keys,
	// locks and announcements from other pipelines', and names it in the
	// errors of the wiring.
	Namespace string
	// Codec encodes values; nil is rcache.JSON.
	Codec rcache.Codec
	// Encrypt, if not nil, seals every value stored.
	Encrypt *keyring.Ring
	// OpTimeout bounds each operation on the service (see [Guard]).
	OpTimeout time.Duration
	// Breaker is the breaker around the service's operations: for
	// [Wire], a breaker the pipeline shares, or nil for one of its own,
	// built from BreakerSettings. OnBreaker hears the breaker's
	// transitions.
	Breaker         *breaker.Breaker
	BreakerSettings breaker.Settings
	OnBreaker       func(name string, from, to breaker.State)
	// Lock says whether the pipeline locks, and Heartbeat is its lock
	// holders' beat (a backend is told it with or without Lock).
	Lock      bool
	Heartbeat time.Duration
	// OnCorrupt hears L2's reads of bytes that do not decode.
	OnCorrupt func(key string, err error)
	// Hooks hear the service's announcements.
	Hooks Hooks
}

// Hooks are a pipeline's answers to the announcements of its service.
// Neither may be nil. Both run on the service's receive goroutine, one at
// a time, so they must be quick and must not block.
type Hooks struct {
	// OnWrite hears each write announced (a Set or an Invalidate, the
	// pipeline's own included): origin names the writer.
	OnWrite func(key, origin string)
	// OnReset hears that announcements may have been lost: the
	// subscription came back after a lost connection.
	OnReset func()
}

// Wired is what the pipeline keeps of its wired service.
type Wired[V any] struct {
	Guard    *Guard          // the service's breaker and timeout
	L2       rcache.Store[V] // the shared cache
	Notifier lock.Notifier   // the wake-ups of the waiters of a key
	Locker   lock.Locker     // nil without Lock
	Coord    Coord[V]        // the seam over the service
	// Closers stop, in order, what the wiring started; the pipeline's
	// Close runs them.
	Closers []func() error
}

// SettingError is a setting that the wiring refused: Field names it as
// the pipeline's Builder does ("Redis", "Lock", "Backend"), and Problem
// says what is wrong.
type SettingError struct {
	Field   string
	Problem string
}

func (e *SettingError) Error() string { return e.Field + ": " + e.Problem }

// WireRedis builds, over o.Client, the Redis cache, the notifier (which
// also keeps the pipeline's L1 coherent, through o.Hooks), with o.Lock the
// Redis lock, the guard around them, and the seam over them all. d is what
// the seam needs of the pipeline; WireRedis gives it the guard, the store,
// the lock and Check. A setting that the cache or the lock refuses is a
// [*SettingError].
func WireRedis[V any](o Options, d Deps[V]) (*Wired[V], error) {
	g := &Guard{Breaker: o.Breaker, OpTimeout: o.OpTimeout, Slots: slotreload.New(o.Client)}
	// The cache and the lock send their commands through one batcher,
	// whose own timeout is the operation timeout: Do leaves it to the
	// batcher when the caller's context has no deadline.
	// Behind the batcher, the cache and the lock do not see a Cluster
	// client: they are told, so that each batch script carries the keys
	// of one hash slot.
	batch := redisbatch.New(o.Client, o.OpTimeout)
	_, cluster := o.Client.(*redis.ClusterClient)
	l2, err := rcache.NewRedis[V](batch, rcache.RedisOptions{
		Prefix: o.Prefix, Namespace: o.Namespace, Codec: o.Codec, Encrypt: o.Encrypt,
		OnCorrupt: o.OnCorrupt, Cluster: cluster,
	})
	if err != nil {
		return nil, &SettingError{Field: "Redis", Problem: err.Error()}
	}
	n, err := rlock.NewRedisNotifier(o.Client, rlock.RedisOptions{Prefix: o.Prefix, Namespace: o.Namespace})
	if err != nil {
		return nil, &SettingError{Field: "Redis", Problem: err.Error()}
	}
	watchRedis(n, o.Hooks)
	w := &Wired[V]{Guard: g, L2: l2, Notifier: n, Closers: []func() error{n.Close}}
	var rl *rlock.Redis // nil without Lock
	if o.Lock {
		lk, err := rlock.NewRedis(batch, rlock.RedisOptions{Prefix: o.Prefix, Namespace: o.Namespace, Heartbeat: o.Heartbeat, Announce: true, Cluster: cluster})
		if err != nil {
			_ = n.Close()
			return nil, &SettingError{Field: "Lock", Problem: err.Error()}
		}
		w.Locker, d.Locker, rl = lk, lk, lk
		w.Closers = append(w.Closers, func() error { lk.Wait(); return nil })
	}
	d.Guard, d.Store = g, l2
	d.Check = checkRedis(o.Client, o.Prefix, o.Namespace, o.Lock)
	w.Coord = NewRedis(d, n, rl)
	return w, nil
}

// watchRedis makes n's subscription tell h of the writes it hears, and of
// each confirmation but the first: the first ends the pipeline's start-up
// window (see resilience's Invalidate); the ones after it follow a lost
// connection, and the announcements published while it was down are lost.
func watchRedis(n *rlock.RedisNotifier, h Hooks) {
	n.SetHooks(rlock.NotifierHooks{
		OnWrite: func(w rlock.Write) { h.OnWrite(w.Key, w.Origin) },
		OnSubscribed: func(count int) {
			if count > 1 {
				h.OnReset()
			}
		},
	})
}

// WireBackend opens the pipeline's view of o.Backend and makes it the L2,
// the notifier, and with o.Lock the lock, behind the guard (breaker and
// operation timeout) that Redis has, with the seam over them; and it makes
// the backend's announcements reach o.Hooks, as WireRedis does with
// Redis's. d is what the seam needs of the pipeline; WireBackend gives it
// the guard, the store, the lock and Check. Open's error comes back
// wrapped; a view the pipeline cannot use is a [*SettingError].
func WireBackend[V any](o Options, d Deps[V]) (*Wired[V], error) {
	g := &Guard{Breaker: o.Breaker, OpTimeout: o.OpTimeout, Deadline: true}
	sh, err := o.Backend.Open(backend.Scope{Namespace: o.Namespace, Heartbeat: o.Heartbeat})
	if err != nil {
		return nil, fmt.Errorf("resilience: pipeline %q: open the backend: %w", o.Namespace, err)
	}
	if sh == nil {
		return nil, &SettingError{Field: "Backend", Problem: "Open returned no view and no error"}
	}
	rs, err := remote.New[V](sh, remote.Options{
		Namespace: o.Namespace, Codec: o.Codec, Encrypt: o.Encrypt, OnCorrupt: o.OnCorrupt,
	})
	if err != nil {
		_ = sh.Close()
		return nil, &SettingError{Field: "Backend", Problem: err.Error()}
	}
	l2 := remote.NewAnnounced(rs, sh)
	w := &Wired[V]{Guard: g, L2: l2, Notifier: sh}
	if o.Lock {
		w.Locker, d.Locker = sh, sh
	}
	d.Guard, d.Store, d.Check = g, l2, checkBackend(sh)
	w.Coord = NewBackend(d, sh)
	stop := sh.Watch(o.Hooks.OnWrite, o.Hooks.OnReset)
	w.Closers = []func() error{func() error { stop(); return nil }, sh.Close}
	return w, nil
}
