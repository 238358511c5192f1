package resilience

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/fallback"
	"github.com/herdguard/herdguard/lock"
	"github.com/herdguard/herdguard/telemetry"
)

// LoadFunc loads the value of key: the expensive call the pipeline guards.
// It should honour ctx. Returning [ErrNotFound] says the key has no value.
type LoadFunc[V any] func(ctx context.Context, key string) (V, error)

// Pipeline runs calls through the stages its [Builder] configured. It is
// safe for concurrent use. Close it when done to stop its background work.
type Pipeline[V any] struct {
	name      string
	keyless   bool
	keyStages bool

	l1         *cache.Memory[V]
	l2         *cache.Redis[V] // nil without Redis
	redisGuard *redisGuard     // Redis breaker, timeouts, bound; nil without Redis
	group      *flights

	locker   lock.Locker
	notifier lock.Notifier
	// rlock is the Redis lock (nil in the embedded default): its looks
	// read the value and try the lock in one round trip, and its leases
	// announce on release; without it the pipeline notifies itself.
	rlock   *lock.Redis
	lockCfg LockSettings

	br        *breaker.Breaker
	retry     *RetrySettings
	fb        fallback.Chain[V]
	isFailure func(error) bool
	tel       *telemetry.Telemetry
	logs      logs

	ttl, l1TTL, negTTL, grace time.Duration
	jitter                    float64
	swr                       bool
	beta                      float64
	timeout, callTimeout      time.Duration
	flightTimeout             time.Duration

	closers []func() error
	bg      tasks // shared loads and refreshes; Close waits for them
	// refreshing holds the keys with a background refresh under way.
	refreshing sync.Map
	closed     atomic.Bool
	closeOnce  sync.Once // Close's work; concurrent callers wait for it
	closeErr   error
}

// Name returns the pipeline's name.
func (p *Pipeline[V]) Name() string { return p.name }

// Get returns the value of key: from the caches if fresh, else from load,
// run once for all concurrent callers. It is [Pipeline.GetResult] without
// the details.
func (p *Pipeline[V]) Get(ctx context.Context, key string, load LoadFunc[V]) (V, error) {
	if err := p.checkGet(ctx, key, load); err != nil {
		var zero V
		return zero, err
	}
	if !p.tel.Off() {
		r, err := p.getObserved(ctx, key, load)
		return r.Value, err
	}
	e, f := p.lookup(key)
	if f == cache.Fresh && !e.NotFound && p.beta == 0 {
		return e.Value, nil // the L1 hit, without building a Result nobody reads
	}
	r, err := p.get(ctx, key, load, e, f)
	return r.Value, err
}

// GetResult is [Pipeline.Get] that also says where the value came from and
// whether the call failed open or fell back.
func (p *Pipeline[V]) GetResult(ctx context.Context, key string, load LoadFunc[V]) (Result[V], error) {
	if err := p.checkGet(ctx, key, load); err != nil {
		return Result[V]{}, err
	}
	if !p.tel.Off() {
		return p.getObserved(ctx, key, load)
	}
	e, f := p.lookup(key)
	return p.get(ctx, key, load, e, f)
}

func (p *Pipeline[V]) checkGet(ctx context.Context, key string, load LoadFunc[V]) error {
	switch {
	case ctx == nil:
		return ErrNilContext
	case key == "":
		return ErrEmptyKey
	case load == nil:
		return ErrNilLoader
	case p.keyless:
		return wrongCall(p.name, "is Keyless: use Do")
	case p.closed.Load():
		return ErrClosed
	}
	return nil
}

func wrongCall(name, why string) error {
	return &wrongCallError{name: name, why: why}
}

type wrongCallError struct{ name, why string }

func (e *wrongCallError) Error() string { return "resilience: pipeline " + quote(e.name) + " " + e.why }
func (e *wrongCallError) Unwrap() error { return ErrWrongCall }

func quote(s string) string { return "\"" + s + "\"" }

// lookup reads key from L1; a pipeline without one always misses.
func (p *Pipeline[V]) lookup(key string) (*cache.Entry[V], cache.Freshness) {
	if p.l1 == nil {
		return nil, cache.Miss
	}
	return p.l1.Lookup(key)
}

// get is the call path with telemetry off, given what L1 held for key. It
// stays free of allocations on an L1 hit.
func (p *Pipeline[V]) get(ctx context.Context, key string, load LoadFunc[V], e *cache.Entry[V], f cache.Freshness) (Result[V], error) {
	switch f {
	case cache.Fresh:
		if p.beta > 0 && p.refreshEarly(e) {
			p.refreshAsync(ctx, key, load, e.Written)
		}
		return fromEntry(e, SourceL1)
	case cache.Stale:
		return p.miss(ctx, key, load, *e, true)
	}
	return p.miss(ctx, key, load, cache.Entry[V]{}, false)
}

// getObserved is the call path with telemetry on: a span for the call and
// one for each stage that runs.
func (p *Pipeline[V]) getObserved(ctx context.Context, key string, load LoadFunc[V]) (Result[V], error) {
	ctx, sp := p.tel.Start(ctx, telemetry.SpanGet, trace.WithAttributes(p.tel.PipelineAttr))
	if sp != nil {
		if kv, ok := p.tel.KeyAttr(key); ok {
			sp.SetAttributes(kv)
		}
	}
	var stale cache.Entry[V]
	hasStale := false
	var r Result[V]
	var err error
	hit := false
	if p.l1 != nil {
		_, l1sp := p.tel.Start(ctx, telemetry.SpanL1)
		e, f := p.l1.Lookup(key)
		if l1sp != nil {
			l1sp.SetAttributes(telemetry.Hit.Bool(f == cache.Fresh), telemetry.Freshness.String(f.String()))
			l1sp.End()
		}
		switch f {
		case cache.Fresh:
			if p.beta > 0 && p.refreshEarly(e) {
				p.refreshAsync(ctx, key, load, e.Written)
			}
			r, err = fromEntry(e, SourceL1)
			hit = true
		case cache.Stale:
			stale, hasStale = *e, true
		}
	}
	if !hit {
		r, err = p.miss(ctx, key, load, stale, hasStale)
	}
	p.finishCall(ctx, sp, &r, err)
	return r, err
}

// finishCall records the call's outcome on its span and in the metrics.
func (p *Pipeline[V]) finishCall(ctx context.Context, sp trace.Span, r *Result[V], err error) {
	if p.tel.Metering() {
		p.tel.Call(ctx, r.Source.String(), r.FailedOpen)
		if r.Cause != nil {
			p.tel.Fallback(ctx, r.Source.String(), reason(r.Cause))
		}
	}
	if sp == nil {
		return
	}
	sp.SetAttributes(telemetry.Source.String(r.Source.String()), telemetry.FailedOpen.Bool(r.FailedOpen))
	if r.NotFound {
		sp.SetAttributes(telemetry.NotFound.Bool(true))
	}
	if r.Cause != nil {
		// Handled: the caller got a value. The cause is an event, not an
		// error status.
		sp.SetAttributes(telemetry.Fallback.Bool(true), telemetry.FallbackReason.String(reason(r.Cause)))
		sp.AddEvent("fallback", trace.WithAttributes(telemetry.FallbackReason.String(reason(r.Cause))))
	}
	if err != nil && !r.NotFound {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}

func fromEntry[V any](e *cache.Entry[V], src Source) (Result[V], error) {
	if e.NotFound {
		return Result[V]{Source: src, NotFound: true}, ErrNotFound
	}
	return Result[V]{Value: e.Value, Source: src}, nil
}

// refreshEarly decides, XFetch style, whether a fresh entry should be
// reloaded now: with probability rising as expiry nears, and earlier for
// values that took long to load.
func (p *Pipeline[V]) refreshEarly(e *cache.Entry[V]) bool {
	if e.LoadDuration <= 0 {
		return false
	}
	gap := float64(e.LoadDuration) * p.beta * -math.Log(1-rand.Float64())
	return time.Now().Add(time.Duration(gap)).After(e.Expires)
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
		p.bg.close()
		var errs []error
		for _, c := range p.closers {
			errs = append(errs, c())
		}
		p.closeErr = errors.Join(errs...)
	})
	return p.closeErr
}
