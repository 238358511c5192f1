package resilience

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/fallback"
	"github.com/herdguard/herdguard/internal/bg"
	"github.com/herdguard/herdguard/internal/coord"
	"github.com/herdguard/herdguard/internal/counts"
	"github.com/herdguard/herdguard/internal/loadcall"
	"github.com/herdguard/herdguard/internal/obs"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/internal/settings"
	"github.com/herdguard/herdguard/lock"
)

// Build checks the configuration and returns the pipeline. The problems of
// the settings are reported together (joined), each as a [*ConfigError]
// saying what to change; a setting that package breaker, cache or lock
// then refuses comes alone, also as a [*ConfigError]. An error creating
// the metric instruments from the MeterProvider is returned as it is, and
// one of [backend.Backend.Open] wrapped (errors.Is finds it).
func (b *Builder[V]) Build() (*Pipeline[V], error) {
	c := b.c
	// The refusals of the builder's methods come first, then the problems
	// that the rules of package settings find over the settings together.
	c.Config = c.WithDefaults()
	errs := make([]error, 0, len(c.errs))
	for _, e := range c.errs {
		errs = append(errs, e)
	}
	w := settings.Wiring{Name: c.name, Redis: c.redis != nil, Backend: c.backend != nil, LockOn: c.lockOn, Lock: settings.Lock(c.lock)}
	for _, pr := range c.Check(w) {
		errs = append(errs, &ConfigError{Pipeline: c.name, Field: pr.Field, Problem: pr.Problem})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	p := &Pipeline[V]{
		name: c.name, keyless: c.Keyless,
		ttl: c.TTL, l1TTL: c.L1TTL, negTTL: c.NegativeTTL, grace: c.Grace,
		jitter: c.Jitter, swr: c.StaleWhileRevalidate, beta: c.EarlyBeta,
		timeout: c.Timeout, callTimeout: c.CallTimeout, flightTimeout: c.FlightTimeout,
	}
	p.lc = loadcall.Caller{
		Timeout: c.Timeout, IsFailure: c.isFailure, Loads: p.stats.Loads(),
		Panicked: panicError, IsPanic: isPanic,
		KeyErrors: keyErrors,
	}
	p.writes.clone = c.clone
	tel, err := obs.New(obs.Scope, obs.Version(), c.name, c.telemetry)
	if err != nil {
		return nil, err
	}
	p.tel, p.lc.Tel = tel, tel
	tel.Log.Logger, tel.Log.Pipeline = c.logger, c.name
	// No caller is left to hear a panic of background work: it is logged.
	p.bg.Panicked = func(ctx context.Context, v any) {
		pe := panicked("pipeline", v)
		p.tel.Log.Panicked(ctx, pe.Value, pe.Stack)
	}
	if c.Retry != nil {
		r := c.Retry.WithDefaults()
		p.lc.Retry = &r
	}
	if c.breakerOn {
		s := settings.LoaderBreaker(c.breaker, c.name, p.lc.IsLoadFailure)
		s.OnStateChange = p.breakerObserver(s.OnStateChange, c.onBreaker)
		if p.br, err = breaker.New(s); err != nil {
			return nil, &ConfigError{Pipeline: c.name, Field: "Breaker", Problem: err.Error()}
		}
		p.lc.Breaker = p.br
	}
	p.fb = fallback.Chain[V]{Default: safeDefault(c.defaultFn), Handles: p.lc.IsLoadFailure}
	if c.Cache {
		p.l1 = rcache.NewMemory[V](rcache.MemoryOptions{MaxEntries: c.MaxEntries})
	}
	if c.SingleFlight || c.lockOn {
		p.group = new(flightGroup[V])
	}
	if c.lockOn {
		p.lockCfg = lockDefaults(c.lock)
	}
	if err := p.wire(c); err != nil {
		return nil, err
	}
	p.keyStages = p.l1 != nil || p.group != nil || p.locker != nil
	// The call metric reads the Stats counters when collected; last, so
	// that no failed Build leaves it registered.
	stop, err := tel.ObserveCalls(tel.Meter, sourceNames[:], p.stats.Calls)
	if err != nil {
		_ = p.Close()
		return nil, err
	}
	p.closers = append(p.closers, stop)
	return p, nil
}

// deps is what the seam's adapters need of p (see coord.Deps): its
// telemetry, its lease, and the steps of its stages. The wiring (wire)
// adds the lock, with the guard, L2 and Check that it builds.
func (p *Pipeline[V]) deps() coord.Deps[V] {
	return coord.Deps[V]{
		Tel: p.tel, Lease: p.lockCfg.Lease,
		Release: p.release, ReleaseMany: p.releaseMany, FailOpen: p.failOpen,
		Panicked: func(v any) any { return panicked("pipeline", v) },
	}
}

// lockDefaults is l with the defaults of its zero fields (see
// [LockSettings]), and its heartbeat capped at a third of its lease.
func lockDefaults(l LockSettings) LockSettings {
	return LockSettings(settings.Lock(l).WithDefaults())
}

// safeDefault wraps the user's Default so that a panic there becomes a
// [*PanicError] for the caller, not a crash.
func safeDefault[V any](fn func(context.Context, string, error) (V, error)) func(context.Context, string, error) (V, error) {
	if fn == nil {
		return nil
	}
	return func(ctx context.Context, key string, cause error) (v V, err error) {
		defer recoverPanic("default", &err)
		return fn(ctx, key, cause)
	}
}

// Pipeline runs calls through the stages its [Builder] configured. It is
// safe for concurrent use. Close it when done to stop its background work.
type Pipeline[V any] struct {
	name      string
	keyless   bool
	keyStages bool

	l1         *rcache.Memory[V]
	l2         rcache.Store[V] // *rcache.Redis or a backend's; nil without either
	redisGuard *coord.Guard    // Redis's or the backend's breaker and timeout; nil without either
	group      *flightGroup[V]

	locker   lock.Locker
	notifier lock.Notifier
	// co is the coordination seam (internal/coord): Redis's, a backend's, or
	// with Lock alone the embedded default's; nil without L2 and lock.
	co      coord.Coord[V]
	lockCfg LockSettings

	br  *breaker.Breaker
	lc  loadcall.Caller // the loader call: its breaker, retry and timeout
	fb  fallback.Chain[V]
	tel *obs.Telemetry // its spans, metrics and event log

	ttl, l1TTL, negTTL, grace time.Duration
	jitter                    float64
	swr                       bool
	beta                      float64
	timeout, callTimeout      time.Duration
	flightTimeout             time.Duration

	closers []func() error
	bg      bg.Tasks // shared loads and refreshes; Close waits for them
	// refreshing holds the keys with a background refresh under way.
	refreshing sync.Map
	closed     atomic.Bool
	stats      counts.Counts
	closeOnce  sync.Once // Close's work; concurrent callers wait for it
	closeErr   error

	writes writes[V] // Set, Invalidate, Clone: see write.go
}

// Close stops the pipeline's background work (shared loads still under way,
// refreshes, the Redis subscription) and waits for it, and for calls that
// are loading; FlightTimeout bounds the wait. Every Close, concurrent ones
// too, returns once that is done, with the first one's result. Calls after
// Close return [ErrClosed]. Close does not close the Redis client, which
// the caller owns.
func (p *Pipeline[V]) Close() error {
	p.closeOnce.Do(func() {
		p.closed.Store(true)
		p.bg.Close()
		var errs []error
		for _, c := range p.closers {
			errs = append(errs, c())
		}
		p.closeErr = errors.Join(errs...)
	})
	return p.closeErr
}
