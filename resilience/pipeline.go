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
	group      *flightGroup[V]

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
	stats      stats
	closeOnce  sync.Once // Close's work; concurrent callers wait for it
	closeErr   error

	writes writes[V] // Set, Invalidate, Clone: see write.go
}

// Name returns the pipeline's name.
func (p *Pipeline[V]) Name() string { return p.name }

// Get returns the value of key: from the caches if fresh, else from load,
// run once for all concurrent callers. It is [Pipeline.GetResult] without
// the details.
//
// The value is shared with the cache and with other callers: do not
// change a map, slice or pointee in it, or use [Builder.Clone].
func (p *Pipeline[V]) Get(ctx context.Context, key string, load LoadFunc[V]) (V, error) {
	if err := p.checkGet(ctx, key, load); err != nil {
		var zero V
		return zero, err
	}
	h, f, done := p.lookup(ctx, key, load)
	if done {
		if h.NotFound() {
			p.stats.notFound.Add(1)
			var zero V
			return zero, ErrNotFound
		}
		return p.out(h.Value()), nil
	}
	r, err := p.cloned(p.call(ctx, key, load, h, f))
	return r.Value, err
}

// GetResult is [Pipeline.Get] that also says where the value came from and
// whether the call failed open or fell back.
func (p *Pipeline[V]) GetResult(ctx context.Context, key string, load LoadFunc[V]) (Result[V], error) {
	if err := p.checkGet(ctx, key, load); err != nil {
		return Result[V]{}, err
	}
	h, f, done := p.lookup(ctx, key, load)
	if done {
		if h.NotFound() {
			p.stats.notFound.Add(1)
			return Result[V]{Source: SourceL1, NotFound: true}, ErrNotFound
		}
		return Result[V]{Value: p.out(h.Value()), Source: SourceL1}, nil
	}
	return p.cloned(p.call(ctx, key, load, h, f))
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

// lookup is a call's one L1 read (a pipeline without L1 always misses).
// It reports done when the fresh entry it found answers the call with
// nothing more to record than a count: no span, since tracing is off or
// the caller's span is not sampled (see [telemetry.Config.HitSpans]).
// Otherwise [Pipeline.call] goes on from what it found. It allocates
// nothing on a hit.
func (p *Pipeline[V]) lookup(ctx context.Context, key string, load LoadFunc[V]) (cache.Hit[V], cache.Freshness, bool) {
	if p.l1 == nil {
		return cache.Hit[V]{}, cache.Miss, false
	}
	h, f := p.l1.Find(key)
	if f != cache.Fresh {
		return h, f, false
	}
	if p.beta > 0 && p.refreshEarly(h) {
		p.refreshAsync(ctx, key, load, h.Written())
	}
	if !p.tel.Off() && p.tel.Tracing() && p.tel.HitSpans(ctx) {
		return h, f, false
	}
	p.stats.l1Hit()
	return h, f, true
}

// call is the rest of a call, from what L1 held for key: a span for the
// call and one for each stage that runs, when tracing is on (the L1 span
// records the lookup just made), then the shared load and the fallbacks.
func (p *Pipeline[V]) call(ctx context.Context, key string, load LoadFunc[V], h cache.Hit[V], f cache.Freshness) (Result[V], error) {
	var sp trace.Span
	if p.tel.Tracing() {
		ctx, sp = p.tel.Start(ctx, telemetry.SpanGet)
		if sp.IsRecording() {
			sp.SetAttributes(p.tel.PipelineAttr)
			if kv, ok := p.tel.KeyAttr(key); ok {
				sp.SetAttributes(kv)
			}
		}
		if p.l1 != nil {
			_, l1sp := p.tel.Start(ctx, telemetry.SpanL1)
			if l1sp.IsRecording() {
				l1sp.SetAttributes(telemetry.Hit.Bool(f == cache.Fresh), telemetry.Freshness.String(f.String()))
			}
			l1sp.End()
		}
	}
	var r Result[V]
	var err error
	switch f {
	case cache.Fresh:
		r, err = fromHit(h)
	case cache.Stale:
		p.stats.misses.Add(1)
		r, err = p.miss(ctx, key, load, h.Entry(), true)
	default:
		p.stats.misses.Add(1)
		r, err = p.miss(ctx, key, load, cache.Entry[V]{}, false)
	}
	p.finishCall(ctx, sp, &r, err)
	return r, err
}

// finishCall counts the call's outcome, and records it on its span and in
// the metrics.
func (p *Pipeline[V]) finishCall(ctx context.Context, sp trace.Span, r *Result[V], err error) {
	countCall(&p.stats, r, err)
	if p.tel.Metering() {
		if r.Cause != nil {
			p.tel.Fallback(ctx, r.Source.String(), reason(r.Cause))
		}
	}
	if sp == nil {
		return
	}
	if !sp.IsRecording() {
		sp.End()
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

func fromHit[V any](h cache.Hit[V]) (Result[V], error) {
	if h.NotFound() {
		return Result[V]{Source: SourceL1, NotFound: true}, ErrNotFound
	}
	return Result[V]{Value: h.Value(), Source: SourceL1}, nil
}

// refreshEarly decides, XFetch style, whether a fresh entry should be
// reloaded now: with probability rising as expiry nears, and earlier for
// values that took long to load.
func (p *Pipeline[V]) refreshEarly(h cache.Hit[V]) bool {
	took := h.LoadDuration()
	if took <= 0 {
		return false
	}
	gap := float64(took) * p.beta * -math.Log(1-rand.Float64())
	return gap > float64(h.FreshFor())
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
