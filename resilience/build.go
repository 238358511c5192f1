package resilience

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/fallback"
	"github.com/herdguard/herdguard/internal/bg"
	"github.com/herdguard/herdguard/internal/coord"
	"github.com/herdguard/herdguard/internal/loadcall"
	"github.com/herdguard/herdguard/internal/obs"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/internal/rlock"
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
	errs := c.errs
	bad := func(field, problem string) {
		errs = append(errs, &ConfigError{Pipeline: c.name, Field: field, Problem: problem})
	}
	if c.name == "" {
		bad("New", "the pipeline needs a name: it appears in errors, spans, metrics and Redis keys")
	}
	if c.keyless {
		for _, s := range []struct {
			on    bool
			field string
		}{{c.cacheOn, "Cache"}, {c.lockOn, "Lock"}, {c.redis != nil, "Redis"}, {c.backend != nil, "Backend"}, {c.singleFlight, "SingleFlight"},
			{c.grace > 0, "Stale"}, {c.negativeTTL > 0, "NegativeTTL"}} {
			if s.on {
				bad(s.field, "needs a key, but the pipeline is Keyless: remove one of the two")
			}
		}
	} else if c.callTimeout > 0 {
		bad("CallTimeout", "bounds Do, which only a Keyless pipeline has; keyed calls are bounded by FlightTimeout and the caller's context")
	}
	needsCache := []struct {
		on    bool
		field string
	}{{c.redis != nil, "Redis"}, {c.backend != nil, "Backend"}, {c.lockOn, "Lock"}, {c.grace > 0, "Stale"}, {c.negativeTTL > 0, "NegativeTTL"},
		{c.swr, "StaleWhileRevalidate"}, {c.earlyBeta > 0, "EarlyRefresh"}, {c.l1TTL > 0, "L1TTL"}, {c.maxEntries > 0, "MaxEntries"}}
	if !c.cacheOn && !c.keyless {
		for _, s := range needsCache {
			if s.on {
				bad(s.field, "needs a cache to keep values in: add Cache(ttl)")
			}
		}
	}
	if c.redis != nil && c.backend != nil {
		bad("Backend", "replaces Redis: a pipeline coordinates through Redis or a Backend, not both; remove one of the two")
	}
	if c.swr && c.grace <= 0 {
		bad("StaleWhileRevalidate", "serves stale copies, so it needs Stale(grace)")
	}
	if c.l1TTL > 0 && c.ttl > 0 && c.l1TTL > c.ttl {
		bad("L1TTL", "must not be longer than the Cache ttl, or processes would serve values Redis has already replaced")
	}
	if c.negativeTTL > 0 && c.ttl > 0 && c.negativeTTL > c.ttl {
		bad("NegativeTTL", "should be shorter than the Cache ttl: a not-found is cached briefly")
	}
	if c.retryOn {
		if p := loadcall.Retry(c.retry).Validate(); p != "" {
			bad("Retry", p)
		}
	}
	if c.lockOn {
		l := c.lock
		for _, d := range []struct {
			name string
			d    time.Duration
		}{{"Lease", l.Lease}, {"MaxWait", l.MaxWait}, {"Poll", l.Poll}, {"Heartbeat", l.Heartbeat}} {
			if d.d < 0 {
				bad("Lock", d.name+" must not be negative (zero takes the default)")
			}
		}
	}
	if !c.timeoutSet && !c.keyless {
		// A Keyless call runs on its caller's context (and CallTimeout):
		// without Timeout, it has no attempt timeout of its own.
		c.timeout = DefaultTimeout
	}
	if c.flightTimeout == 0 {
		c.flightTimeout = DefaultFlightTimeout
	}
	if !c.keyless && c.flightTimeout < c.timeout {
		bad("FlightTimeout", "must be at least Timeout, or no loader attempt could finish")
	}
	if len(errs) > 0 {
		joined := make([]error, len(errs))
		for i, e := range errs {
			joined[i] = e
		}
		return nil, errors.Join(joined...)
	}

	p := &Pipeline[V]{
		name: c.name, keyless: c.keyless,
		ttl: c.ttl, l1TTL: c.l1TTL, negTTL: c.negativeTTL, grace: c.grace,
		swr: c.swr, beta: c.earlyBeta,
		timeout: c.timeout, callTimeout: c.callTimeout, flightTimeout: c.flightTimeout,
	}
	p.lc = loadcall.Caller{
		Timeout: c.timeout, IsFailure: c.isFailure, Loads: &p.stats.loads,
		Panicked: panicError, IsPanic: isPanic,
		KeyErrors: keyErrors,
	}
	p.writes.clone = c.clone
	p.jitter = DefaultJitter
	if c.jitterSet {
		p.jitter = c.jitter
	}
	if p.l1TTL == 0 {
		p.l1TTL = p.ttl
	}
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
	if c.retryOn {
		r := loadcall.Retry(c.retry).WithDefaults()
		p.lc.Retry = &r
	}
	if c.breakerOn {
		s := c.breaker
		if s.Name == "" {
			s.Name = c.name
		}
		if s.IsFailure == nil {
			s.IsFailure = p.lc.IsLoadFailure
		}
		s.OnStateChange = p.breakerObserver(s.OnStateChange, c.onBreaker)
		if p.br, err = breaker.New(s); err != nil {
			return nil, &ConfigError{Pipeline: c.name, Field: "Breaker", Problem: err.Error()}
		}
		p.lc.Breaker = p.br
	}
	p.fb = fallback.Chain[V]{Default: safeDefault(c.defaultFn), Handles: p.lc.IsLoadFailure}
	if c.cacheOn {
		p.l1 = rcache.NewMemory[V](rcache.MemoryOptions{MaxEntries: c.maxEntries})
	}
	if c.singleFlight || c.lockOn {
		p.group = new(flightGroup[V])
	}
	if c.lockOn {
		p.lockCfg = lockDefaults(c.lock)
	}
	if c.redis != nil {
		if err := p.wireRedis(c); err != nil {
			return nil, err
		}
	}
	if c.backend != nil {
		if err := p.wireBackend(c); err != nil {
			_ = p.Close() // what wireBackend subscribed to
			return nil, err
		}
	}
	if c.lockOn && p.locker == nil { // embedded default
		n := new(rlock.MemoryNotifier)
		p.locker, p.notifier = new(lock.Memory), n
		d := p.deps()
		d.Read = p.l1Read
		p.co = coord.NewMemory(d, n)
	}
	p.keyStages = p.l1 != nil || p.group != nil || p.locker != nil
	// The call metric reads the Stats counters when collected; last, so
	// that no failed Build leaves it registered.
	stop, err := tel.ObserveCalls(tel.Meter, sourceNames[:], p.stats.calls)
	if err != nil {
		_ = p.Close()
		return nil, err
	}
	p.closers = append(p.closers, stop)
	return p, nil
}

// deps is what the seam's adapters need of p (see coord.Deps): its
// telemetry, its lock and lease, and the steps of its stages. The lock is
// the embedded default's; the wiring of Redis or a backend
// (coord.WireRedis, coord.WireBackend) adds its own lock, with the
// guard, L2 and Check that it builds.
func (p *Pipeline[V]) deps() coord.Deps[V] {
	return coord.Deps[V]{
		Tel: p.tel, Locker: p.locker, Lease: p.lockCfg.Lease,
		Read: p.l2Get, Release: p.release, ReleaseMany: p.releaseMany,
		FailOpen: p.failOpen,
		Panicked: func(v any) any { return panicked("pipeline", v) },
	}
}

// l1Read is the embedded default's read: L1, where the values that
// waiters look at land.
func (p *Pipeline[V]) l1Read(_ context.Context, key string) (rcache.Entry[V], cache.Freshness, error) {
	e, f := p.l1.Lookup(key)
	if e == nil {
		return rcache.Entry[V]{}, f, nil
	}
	return *e, f, nil
}

func lockDefaults(l LockSettings) LockSettings {
	if l.Lease == 0 {
		l.Lease = DefaultLockLease
	}
	if l.MaxWait == 0 {
		l.MaxWait = DefaultLockMaxWait
	}
	if l.Poll == 0 {
		l.Poll = 200 * time.Millisecond
	}
	if l.Heartbeat == 0 {
		l.Heartbeat = DefaultLockHeartbeat
	}
	l.Heartbeat = min(l.Heartbeat, l.Lease/3)
	return l
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
	stats      stats
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
