package resilience

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/telemetry"
)

// remoteStore is what the pipeline needs of a shared cache: [cache.Redis],
// or, for lock waiters in the embedded default, the in-process cache.
type remoteStore[V any] interface {
	Get(ctx context.Context, key string) (cache.Entry[V], cache.Freshness, error)
	Set(ctx context.Context, key string, e cache.Entry[V]) (bool, error)
}

// memStore adapts the in-process cache to remoteStore.
type memStore[V any] struct{ m *cache.Memory[V] }

func (s memStore[V]) Get(_ context.Context, key string) (cache.Entry[V], cache.Freshness, error) {
	e, f := s.m.Lookup(key)
	if e == nil {
		return cache.Entry[V]{}, f, nil
	}
	return *e, f, nil
}

func (s memStore[V]) Set(_ context.Context, key string, e cache.Entry[V]) (bool, error) {
	s.m.Set(key, e)
	return true, nil
}

// l2Get reads key from Redis through the Redis breaker, with a client span.
// An error means the call fails open: it goes on without L2.
func (p *Pipeline[V]) l2Get(ctx context.Context, key string) (cache.Entry[V], cache.Freshness, error) {
	var sp trace.Span
	if p.tel.Tracing() {
		ctx, sp = p.tel.Start(ctx, telemetry.SpanL2, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(telemetry.DBSystemRedis, telemetry.DBOperationName.String("GET")))
		defer sp.End()
	}
	type got struct {
		e cache.Entry[V]
		f cache.Freshness
	}
	g, err := guard(ctx, p.infra, "l2_get", func(ctx context.Context) (got, error) {
		e, f, err := p.l2.Get(ctx, key)
		return got{e, f}, err
	}, nil)
	e, f := g.e, g.f
	if sp != nil {
		sp.SetAttributes(telemetry.Hit.Bool(f == cache.Fresh), telemetry.Freshness.String(f.String()))
	}
	if err != nil {
		p.failOpen(ctx, sp, "l2_get", err)
	}
	return e, f, err
}

// failOpen records that a call went on without Redis.
func (p *Pipeline[V]) failOpen(ctx context.Context, sp trace.Span, op string, err error) {
	why := "redis_error"
	if isBreakerRefusal(err) {
		why = "breaker_open"
	}
	if sp != nil {
		sp.SetAttributes(telemetry.FailedOpen.Bool(true), telemetry.FailOpenReason.String(why))
		sp.AddEvent("failed open", trace.WithAttributes(telemetry.FailOpenReason.String(why)))
		// Handled: the call goes on. The span keeps its status unset.
	}
	if p.tel.Metering() {
		p.tel.FailOpen(ctx, op+":"+why)
	}
}

// fillL1 copies an entry read from L2 into L1, keeping L1's TTL no longer
// than L1TTL.
func (p *Pipeline[V]) fillL1(key string, e cache.Entry[V]) {
	if p.l1 == nil {
		return
	}
	if limit := time.Now().Add(p.l1TTL); e.Expires.After(limit) {
		e.Expires = limit
		if e.StaleUntil.Before(limit) {
			e.StaleUntil = limit
		}
	}
	p.l1.Set(key, e)
}

// store writes a loaded entry to L2 (fenced) and L1. A write refused by the
// fence leaves L1 alone too: a newer value exists.
func (p *Pipeline[V]) store(ctx context.Context, key string, e cache.Entry[V], o *outcome[V]) {
	if p.l2 != nil && !o.res.FailedOpen {
		var sp trace.Span
		if p.tel.Tracing() {
			ctx, sp = p.tel.Start(ctx, telemetry.SpanWriteBack, trace.WithSpanKind(trace.SpanKindClient),
				trace.WithAttributes(telemetry.DBSystemRedis, telemetry.DBOperationName.String("EVALSHA"), telemetry.LockFence.Int64(e.Fence)))
			defer sp.End()
		}
		stored, err := guard(ctx, p.infra, "l2_set", func(ctx context.Context) (bool, error) {
			return p.l2.Set(ctx, key, e)
		}, nil)
		switch {
		case errors.Is(err, cache.ErrExpiredEntry):
			// Nothing to keep: the entry's grace ended while it loaded.
		case err != nil:
			o.res.FailedOpen = true
			p.failOpen(ctx, sp, "l2_set", err)
		case !stored:
			if sp != nil {
				sp.AddEvent("write refused: a newer fence wrote the key")
				sp.SetStatus(codes.Unset, "")
			}
			return
		}
	}
	p.fillL1(key, e)
}

// Invalidate removes key from the in-process cache and from Redis.
func (p *Pipeline[V]) Invalidate(ctx context.Context, key string) error {
	if key == "" {
		return ErrEmptyKey
	}
	if p.l1 != nil {
		p.l1.Delete(key)
	}
	if d, ok := p.l2.(interface {
		Delete(context.Context, string) error
	}); ok && p.l2 != nil {
		_, err := guard(ctx, p.infra, "l2_delete", func(ctx context.Context) (struct{}, error) {
			return struct{}{}, d.Delete(ctx, key)
		}, nil)
		return err
	}
	return nil
}
