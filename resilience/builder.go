package resilience

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/internal/loadcall"
	"github.com/herdguard/herdguard/internal/settings"
	"github.com/herdguard/herdguard/keyring"
	"github.com/herdguard/herdguard/telemetry"
)

// Builder assembles a [Pipeline]. Its methods record settings and return
// the builder, so calls chain; [Builder.Build] checks them all at once.
// A Builder is not safe for concurrent use; the Pipeline it builds is.
type Builder[V any] struct {
	c config[V]
}

// config is what the builder records: the settings the rules read
// (settings.Config, checked by Build), and beside them the ones the
// wiring reads (wire.go), the callbacks and the problems found so far.
type config[V any] struct {
	settings.Config

	name string

	breakerOn bool
	breaker   breaker.Settings

	lockOn bool
	lock   LockSettings

	redis     redis.UniversalClient
	redisOpts RedisOptions

	backend     backend.Backend
	backendOpts BackendOptions

	defaultFn func(ctx context.Context, key string, cause error) (V, error)
	clone     func(V) V
	isFailure func(error) bool
	onBreaker func(name string, from, to breaker.State)
	logger    *slog.Logger
	telemetry telemetry.Config
	errs      []*ConfigError
}

// New starts a builder for the pipeline named name. The name appears in
// errors, spans, metrics and Redis keys, so it should be stable and unique
// per call site.
func New[V any](name string) *Builder[V] {
	return &Builder[V]{c: config[V]{name: name}}
}

func (b *Builder[V]) fail(field, format string, args ...any) *Builder[V] {
	b.c.errs = append(b.c.errs, &ConfigError{Pipeline: b.c.name, Field: field, Problem: fmt.Sprintf(format, args...)})
	return b
}

// setPositive sets *dst to v, or records that field's argument (named by
// arg, if not "") must be positive. It reports whether it set *dst.
func setPositive[V any, T int | float64 | time.Duration](b *Builder[V], field, arg string, v T, dst *T) bool {
	if v <= 0 {
		b.fail(field, "%smust be positive, got %v", arg, v)
		return false
	}
	*dst = v
	return true
}

// Keyless declares a pipeline for calls that have no key (an HTTP POST, a
// write): only breaker, retry, timeouts and the default run, through
// [Pipeline.Do]. Build refuses key stages (cache, lock, Redis) on it.
// Its calls run on the caller's goroutine and have no attempt timeout
// unless [Builder.Timeout] sets one.
func (b *Builder[V]) Keyless() *Builder[V] { b.c.Keyless = true; return b }

// Cache turns on the in-process cache (L1), keeping each value fresh for
// ttl (jittered, see [Builder.Jitter]). With [Builder.Redis], ttl is also
// the Redis cache's TTL.
func (b *Builder[V]) Cache(ttl time.Duration) *Builder[V] {
	if setPositive(b, "Cache", "ttl ", ttl, &b.c.TTL) {
		b.c.Cache = true
	}
	return b
}

// L1TTL keeps values in the in-process cache for d instead of the Cache
// ttl, so that processes pick up a value another one rewrote in Redis
// sooner. It must not be longer than the Cache ttl.
// default: the Cache ttl
func (b *Builder[V]) L1TTL(d time.Duration) *Builder[V] {
	setPositive(b, "L1TTL", "", d, &b.c.L1TTL)
	return b
}

// MaxEntries bounds the in-process cache.
// default: 10,000
func (b *Builder[V]) MaxEntries(n int) *Builder[V] {
	setPositive(b, "MaxEntries", "", n, &b.c.MaxEntries)
	return b
}

// Jitter spreads each TTL at random over its last fraction, so that keys
// written together do not expire together. 0 turns jitter off.
// default: 0.1
func (b *Builder[V]) Jitter(fraction float64) *Builder[V] {
	if fraction < 0 || fraction >= 1 {
		return b.fail("Jitter", "fraction must be in [0, 1), got %v", fraction)
	}
	b.c.Jitter, b.c.JitterSet = fraction, true
	return b
}

// NegativeTTL caches a loader's [ErrNotFound] for d, so a missing key does
// not reach the loader on every call. Keep it short.
// default: 0 (not-found is not cached)
func (b *Builder[V]) NegativeTTL(d time.Duration) *Builder[V] {
	setPositive(b, "NegativeTTL", "", d, &b.c.NegativeTTL)
	return b
}

// Stale keeps each cached value for grace past its TTL as a stale copy,
// which the fallback chain serves when the loader fails.
// default: 0 (no stale copies)
func (b *Builder[V]) Stale(grace time.Duration) *Builder[V] {
	setPositive(b, "Stale", "grace ", grace, &b.c.Grace)
	return b
}

// StaleWhileRevalidate serves a stale copy at once when the value has
// expired, and refreshes it once in the background. Needs [Builder.Stale].
func (b *Builder[V]) StaleWhileRevalidate() *Builder[V] { b.c.StaleWhileRevalidate = true; return b }

// EarlyRefresh refreshes hot keys before they expire, in the background,
// with probability rising as expiry nears and with the value's last load
// time (XFetch, Vattani et al., VLDB 2015). beta scales how early: 1 is the
// paper's choice; larger is earlier.
// default: off
func (b *Builder[V]) EarlyRefresh(beta float64) *Builder[V] {
	setPositive(b, "EarlyRefresh", "beta ", beta, &b.c.EarlyBeta)
	return b
}

// SingleFlight coalesces concurrent calls for one key in this process into
// one load. [Builder.Lock] turns it on too.
func (b *Builder[V]) SingleFlight() *Builder[V] { b.c.SingleFlight = true; return b }

// Breaker puts a circuit breaker around the loader. Zero fields of s take
// the breaker package's defaults: open after 5 consecutive failures, stay
// open 30 seconds, one half-open probe. s.Name defaults to the pipeline's
// name.
func (b *Builder[V]) Breaker(s breaker.Settings) *Builder[V] {
	b.c.breakerOn, b.c.breaker = true, s
	return b
}

// OnBreakerChange is called after each state change of the pipeline's
// breakers (the loader's, and the Redis one), outside their locks.
func (b *Builder[V]) OnBreakerChange(fn func(name string, from, to breaker.State)) *Builder[V] {
	b.c.onBreaker = fn
	return b
}

// Timeout bounds each loader attempt. The attempt returns at the timeout
// even when the loader ignores its context (the loader then runs on a
// goroutine of its own, whose late result is dropped).
// default: 10 seconds; none on a Keyless pipeline, whose calls run on the
// caller's goroutine, bounded by the caller's context and CallTimeout
func (b *Builder[V]) Timeout(d time.Duration) *Builder[V] {
	if setPositive(b, "Timeout", "", d, &b.c.Timeout) {
		b.c.TimeoutSet = true
	}
	return b
}

// CallTimeout bounds a whole call to [Pipeline.Do], retries included.
// default: none beyond the caller's context
func (b *Builder[V]) CallTimeout(d time.Duration) *Builder[V] {
	setPositive(b, "CallTimeout", "", d, &b.c.CallTimeout)
	return b
}

// FlightTimeout bounds a shared load (lock wait, retries and loader
// attempts together), which runs detached from its callers' contexts.
// default: 1 minute
func (b *Builder[V]) FlightTimeout(d time.Duration) *Builder[V] {
	setPositive(b, "FlightTimeout", "", d, &b.c.FlightTimeout)
	return b
}

// Retry retries failed loader attempts with exponential backoff and jitter.
// See [RetrySettings] for the defaults.
func (b *Builder[V]) Retry(s RetrySettings) *Builder[V] {
	r := loadcall.Retry(s)
	b.c.Retry = &r
	return b
}

// Lock turns on the distributed lock, so one process loads a cold key while
// others wait for its value. Without [Builder.Redis] the lock is in-process.
// Zero fields of s take defaults; see [LockSettings].
func (b *Builder[V]) Lock(s LockSettings) *Builder[V] {
	b.c.lockOn, b.c.lock = true, s
	return b
}

// Redis adds a Redis cache (L2) behind the in-process one, and with
// [Builder.Lock], makes the lock a Redis lock shared by every process on
// the same Redis. client may be a single node, Sentinel or Cluster client.
func (b *Builder[V]) Redis(client redis.UniversalClient) *Builder[V] {
	if isNil(client) {
		return b.fail("Redis", "client is nil")
	}
	b.c.redis = client
	return b
}

// RedisOptions sets the Redis options; see [RedisOptions] for defaults.
func (b *Builder[V]) RedisOptions(o RedisOptions) *Builder[V] {
	if b.badStoreOptions("RedisOptions", o.OpTimeout, o.Encrypt) {
		return b
	}
	b.c.redisOpts = o
	return b
}

// Backend makes b the pipeline's coordination service, in place of Redis:
// the shared cache (L2) behind the in-process one and, with
// [Builder.Lock], the lock shared by every process on the same backend,
// with the promises the pipeline keeps with Redis (see [backend.Backend]). Build
// opens b's view of the pipeline (its namespace is the pipeline's name)
// and Close closes it. A pipeline has Redis or a Backend, not both.
func (b *Builder[V]) Backend(be backend.Backend) *Builder[V] {
	if isNil(be) {
		return b.fail("Backend", "backend is nil")
	}
	b.c.backend = be
	return b
}

// BackendOptions sets the options of the pipeline's use of its
// [Builder.Backend]; see [BackendOptions] for defaults.
func (b *Builder[V]) BackendOptions(o BackendOptions) *Builder[V] {
	if b.badStoreOptions("BackendOptions", o.OpTimeout, o.Encrypt) {
		return b
	}
	b.c.backendOpts = o
	return b
}

// badStoreOptions records the problems of the fields RedisOptions and
// BackendOptions share, and reports whether there was one.
func (b *Builder[V]) badStoreOptions(field string, opTimeout time.Duration, ring *keyring.Ring) bool {
	switch {
	case opTimeout < 0:
		b.fail(field, "OpTimeout must not be negative, got %v", opTimeout)
	case ring != nil && len(ring.IDs()) == 0:
		b.fail(field, "Encrypt holds no keys: build the keyring with keyring.New")
	default:
		return false
	}
	return true
}

// Default makes fn the fallback chain's last resort: when the loader fails
// and no stale copy is left, fn's value is served. fn is given the key and
// the loader's error, so it can answer by key or by cause; an error from
// fn is returned as a [*fallback.DefaultError] holding both errors. Use
// [Builder.DefaultValue] for one value for every key. Default and
// DefaultValue set the same last resort: the later call replaces the
// earlier one.
// default: none (the loader's error is returned)
func (b *Builder[V]) Default(fn func(ctx context.Context, key string, cause error) (V, error)) *Builder[V] {
	if fn == nil {
		return b.fail("Default", "fn is nil")
	}
	b.c.defaultFn = fn
	return b
}

// DefaultValue serves v when the loader fails and no stale copy is left.
// It is [Builder.Default] with a fn that returns v and no error, for every
// key and every cause.
// default: none (the loader's error is returned)
func (b *Builder[V]) DefaultValue(v V) *Builder[V] {
	b.c.defaultFn = func(context.Context, string, error) (V, error) { return v, nil }
	return b
}

// IsFailure decides which loader errors count against the breaker, are
// retried (with [Builder.Retry]; RetrySettings.Retryable may narrow that
// further) and go to the fallback chain; the others are answers, returned
// to the caller as they are. [ErrNotFound] and the caller's own
// cancellation never count; a timeout and a panic always do.
// default: every other error
func (b *Builder[V]) IsFailure(fn func(error) bool) *Builder[V] {
	b.c.isFailure = fn
	return b
}

// Logger makes the pipeline log its notable events: breaker transitions
// (each one), and, at most once a minute each, Redis failures that make
// calls fail open (with the error: a wrong password or a missing ACL
// permission shows here), unusable data found in Redis, and lock holders
// that lost their lease. Keys are never logged.
// default: nil (no logs)
func (b *Builder[V]) Logger(l *slog.Logger) *Builder[V] { b.c.logger = l; return b }

// Telemetry sets the providers and key policy; see [telemetry.Config].
// A provider c leaves nil keeps the one an earlier
// [Builder.TracerProvider] or [Builder.MeterProvider] set: of the calls
// that set a provider, the last one wins, in either order. Keys and
// HitSpans are set only here, as c has them.
// default: the global providers, keys off spans
func (b *Builder[V]) Telemetry(c telemetry.Config) *Builder[V] {
	if c.TracerProvider == nil {
		c.TracerProvider = b.c.telemetry.TracerProvider
	}
	if c.MeterProvider == nil {
		c.MeterProvider = b.c.telemetry.MeterProvider
	}
	b.c.telemetry = c
	return b
}

// TracerProvider sets the TracerProvider, as the TracerProvider field of
// [Builder.Telemetry] does: the last of the two calls to set one wins.
// default: otel.GetTracerProvider()
func (b *Builder[V]) TracerProvider(tp trace.TracerProvider) *Builder[V] {
	b.c.telemetry.TracerProvider = tp
	return b
}

// MeterProvider sets the MeterProvider, as the MeterProvider field of
// [Builder.Telemetry] does: the last of the two calls to set one wins.
// default: otel.GetMeterProvider()
func (b *Builder[V]) MeterProvider(mp metric.MeterProvider) *Builder[V] {
	b.c.telemetry.MeterProvider = mp
	return b
}

// Clone makes every value handed to a caller (by Get, GetResult, Peek,
// Refresh) a copy made by clone, and Set store a copy of its value, so
// that callers may change what they get. Without it, values are shared:
// every caller of a key gets the value the cache holds, and must not
// change a map, slice or pointer in it. clone runs on every call, L1 hits
// included; it must not panic.
// default: none (values are shared)
func (b *Builder[V]) Clone(clone func(V) V) *Builder[V] {
	if clone == nil {
		return b.fail("Clone", "must not be nil")
	}
	b.c.clone = clone
	return b
}
