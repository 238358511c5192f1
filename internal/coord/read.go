package coord

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/telemetry"
)

// readL2 is the plain read of the adapters over L2, Redis's and a
// backend's (their Read): key's stored value from d.Store, through the
// guard, with a client span named telemetry.SpanL2 that carries co's
// attributes (HGET, or the backend's Load) and what it found. A per-key
// data problem is a miss, counted as a corrupt entry; any other error is
// recorded as failing open (op l2_get) and returned.
func (d *Deps[V]) readL2(ctx context.Context, co Coord[V], key string) (rcache.Entry[V], cache.Freshness, error) {
	var sp trace.Span
	if d.Tel.Tracing() {
		ctx, sp = d.Tel.Start(ctx, telemetry.SpanL2, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(co.L2Attrs("HGET", "Load")...))
		defer sp.End()
	}
	type got struct {
		e rcache.Entry[V]
		f cache.Freshness
	}
	g, err := Do(ctx, d.Guard, func(ctx context.Context) (got, error) {
		e, f, err := d.Store.Get(ctx, key)
		return got{e, f}, err
	})
	if err != nil && Classify(ctx, err) == Data {
		d.Tel.CorruptEntry(ctx, sp)
		g, err = got{f: cache.Miss}, nil
	}
	if sp != nil {
		sp.SetAttributes(telemetry.Hit.Bool(g.f == cache.Fresh), telemetry.Freshness.String(g.f.String()))
	}
	if err != nil {
		d.FailOpen(ctx, sp, "l2_get", err)
	}
	return g.e, g.f, err
}

// readL2Many is readL2 for many keys (the adapters' ReadMany): one
// GetMany of d.Store, as one span and one operation of the guard, whose
// answers are looks that try no lock. A key's data problem is a miss,
// counted as a corrupt entry; any other key's failure fails the read as
// a whole, which is recorded as failing open (op l2_get) and returned.
func (d *Deps[V]) readL2Many(ctx context.Context, co Coord[V], keys []string) ([]Look[V], error) {
	sctx, sp := ctx, trace.Span(nil)
	if d.Tel.Tracing() {
		sctx, sp = d.Tel.Start(ctx, telemetry.SpanL2, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(co.L2Attrs("HGET", "Load", attrKeys.Int(len(keys)))...))
	}
	gots, err := Do(sctx, d.Guard, func(ctx context.Context) ([]rcache.Got[V], error) {
		gs, err := d.Store.GetMany(ctx, keys)
		if err != nil {
			return nil, err
		}
		for _, g := range gs {
			if g.Err != nil && Classify(ctx, g.Err) != Data {
				return gs, g.Err
			}
		}
		return gs, nil
	})
	if err != nil {
		d.FailOpen(sctx, sp, "l2_get", err)
	}
	if sp != nil {
		sp.End()
	}
	if err != nil {
		return nil, err
	}
	looks := make([]Look[V], len(gots))
	for i, g := range gots {
		if g.Err != nil {
			d.Tel.CorruptEntry(ctx, nil)
			continue
		}
		looks[i].E, looks[i].F = g.Entry, g.Freshness
	}
	return looks, nil
}
