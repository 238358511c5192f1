package coord

import (
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/internal/rlock"
	"github.com/herdguard/herdguard/lock"
)

// The defaults that [Wire] gives the settings of [Options] left zero
// (Prefix defaults to rkey.DefaultPrefix). Package resilience publishes
// them as DefaultRedisTimeout, DefaultBackendTimeout,
// DefaultRedisOpenTimeout and DefaultRedisFailureRatio, whose doc
// comments give the reason for each value.
const (
	// DefaultRedisTimeout is OpTimeout with Redis.
	DefaultRedisTimeout = 200 * time.Millisecond
	// DefaultBackendTimeout is OpTimeout with a backend.
	DefaultBackendTimeout = time.Second
	// DefaultOpenTimeout and DefaultFailureRatio are those of the breaker
	// around the service, when its settings give neither.
	DefaultOpenTimeout  = time.Second
	DefaultFailureRatio = 0.5
)

// Wire wires the pipeline to its service, Redis with o.Client
// ([WireRedis]) or else o.Backend ([WireBackend]), after it fills o's
// zero settings with the defaults above and finds the breaker around the
// service: o.Breaker when it is set (a breaker the pipeline shares), or
// one built from o.BreakerSettings, named "redis" or "backend" unless
// those name it. The pipeline hears the breaker's transitions through
// o.OnBreaker until its Close (the last of the closers). Settings that
// the breaker refuses are a [*SettingError] of the Builder's field that
// holds them, RedisOptions or BackendOptions; on any error, what Wire
// started is stopped.
func Wire[V any](o Options, d Deps[V]) (*Wired[V], error) {
	build, timeout := WireBackend[V], DefaultBackendTimeout
	name, field := "backend", "BackendOptions"
	if o.Client != nil {
		build, timeout = WireRedis[V], DefaultRedisTimeout
		name, field = "redis", "RedisOptions"
		if o.Prefix == "" {
			o.Prefix = rkey.DefaultPrefix
		}
	}
	if o.OpTimeout == 0 {
		o.OpTimeout = timeout
	}
	if o.Breaker == nil {
		bs := o.BreakerSettings
		if bs.Name == "" {
			bs.Name = name
		}
		if bs.OpenTimeout == 0 {
			bs.OpenTimeout = DefaultOpenTimeout
		}
		if bs.Failures == 0 && bs.FailureRatio == 0 {
			bs.FailureRatio = DefaultFailureRatio
		}
		br, err := breaker.New(bs)
		if err != nil {
			return nil, &SettingError{Field: field, Problem: err.Error()}
		}
		o.Breaker = br
	}
	unsubscribe := o.Breaker.Subscribe(o.OnBreaker)
	w, err := build(o, d)
	if err != nil {
		unsubscribe()
		return nil, err
	}
	w.Closers = append(w.Closers, func() error { unsubscribe(); return nil })
	return w, nil
}

// WireMemory wires the embedded default of one process: a [lock.Memory],
// its notifier, and the seam over them, whose looks read l1, where the
// values that waiters look at land. It has no L2, guard or Check.
func WireMemory[V any](d Deps[V], l1 *rcache.Memory[V]) *Wired[V] {
	n, lk := new(rlock.MemoryNotifier), new(lock.Memory)
	d.Locker = lk
	return &Wired[V]{Notifier: n, Locker: lk, Coord: NewMemory(d, n, l1)}
}
