package resilience

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/internal/coord"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/telemetry"
)

// l2Span starts the client span of an L2 operation named name, when
// tracing is on (nil otherwise): Redis's command or the backend's method,
// and more unless it is the zero KeyValue (a value, not a variadic list,
// so that a call without tracing builds no slice).
func (p *Pipeline[V]) l2Span(ctx context.Context, name, redisOp, backendOp string, more attribute.KeyValue) (context.Context, trace.Span) {
	if !p.tel.Tracing() {
		return ctx, nil
	}
	as := p.co.L2Attrs(redisOp, backendOp)
	if more.Valid() {
		as = append(as, more)
	}
	return p.tel.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(as...))
}

// failOpen records that a call went on without Redis, for the reason
// the metrics give: the breaker's refusal, Redis's ACL refusing the
// pipeline (misconfigured: credentials or ACL), or the service failing.
func (p *Pipeline[V]) failOpen(ctx context.Context, sp trace.Span, op string, err error) {
	why := p.co.FailReason()
	if coord.Classify(ctx, err) == coord.Refused {
		why = "breaker_open"
	} else if isDenied(err) {
		why = "redis_denied"
	}
	p.tel.FailedOpen(ctx, sp, op, why, err)
}

// store writes a loaded entry to L2 and L1. Under a grant, the write goes
// through only while the lease still holds (a holder that lost it writes
// nothing, since a newer load may already have landed) and only above the
// stored entry's fence. A write refused either way leaves L1 alone too: a
// newer value exists, or may.
func (p *Pipeline[V]) store(ctx context.Context, key string, e rcache.Entry[V], g *coord.Grant, o *outcome[V]) {
	if g != nil && g.Lost.Load() {
		p.tel.LeaseLost(ctx, nil)
		return
	}
	if p.l2 != nil && !o.res.FailedOpen {
		ctx, sp := p.l2Span(ctx, telemetry.SpanWriteBack, "EVALSHA", "Save", telemetry.LockFence.Int64(e.Fence))
		if sp != nil {
			defer sp.End()
		}
		// With L2, a grant is always of L2's own lock (Redis's, or the
		// backend's): the embedded default's lock has no L2.
		stored, err := coord.Do(ctx, p.redisGuard, func(ctx context.Context) (bool, error) {
			if g != nil {
				// The holder's last step, in one round trip: write while
				// its token holds the lock, release, announce.
				return p.co.Commit(ctx, key, e, g.Lease.Token())
			}
			return p.l2.Set(ctx, key, e)
		})
		if g != nil && err == nil {
			g.End()
			g.Lease.Forget() // released by the commit
			g.Released = true
		}
		fate := coord.FateOf(ctx, rcache.Written{Stored: stored, Err: err})
		if !p.committed(ctx, sp, fate, err, false, o) {
			if fate == coord.Outdated && sp != nil {
				sp.AddEvent("write refused: a newer fence wrote the key")
				sp.SetStatus(codes.Unset, "")
			}
			return
		}
	}
	p.fillL1(key, e, o)
}

// storeMany writes a batch's entries to L2 in one round trip, and to L1
// those that L2 did not refuse; it returns the leases still to release.
func (p *Pipeline[V]) storeMany(ctx context.Context, writes []rcache.Write[V], items []*loadItem, outs map[string]*keyOut[V]) (release []*backend.Lease) {
	if len(writes) == 0 {
		return nil
	}
	ctx, sp := p.l2Span(ctx, telemetry.SpanWriteBack, "EVALSHA", "Save", attrKeys.Int(len(writes)))
	if sp != nil {
		defer sp.End()
	}
	answers, err := coord.CommitBatch(ctx, p.redisGuard, p.co, writes)
	if err != nil {
		p.failOpen(ctx, sp, "l2_set", err)
	}
	refused := 0
	for i, w := range writes {
		it, a := items[i], answers[i]
		out := outs[it.key]
		if a.Fate.Held() {
			release = appendLease(release, it.lease)
		} else if it.lease != nil {
			it.lease.Forget() // released by the commit, or lost
		}
		if a.Fate == coord.Outdated {
			refused++
		}
		// A batch's failure as a whole (err) is recorded once, above.
		if p.committed(ctx, sp, a.Fate, a.Err, err != nil, out.o) {
			p.fillL1(it.key, w.Entry, out.o)
		}
	}
	if sp != nil && refused > 0 {
		sp.AddEvent("writes refused: a newer fence wrote the key", trace.WithAttributes(attrKeys.Int(refused)))
	}
	return release
}

// committed records on sp what became of one write-back (fate, with err)
// and reports whether L1 takes its entry: not when the write was refused
// (a newer fence wrote the key) or its lease was lost, since a newer value
// exists or may. A write the service failed fails open, unless whole says
// the batch's failure as a whole was recorded already.
func (p *Pipeline[V]) committed(ctx context.Context, sp trace.Span, fate coord.Fate, err error, whole bool, o *outcome[V]) bool {
	switch fate {
	case coord.LeaseLost:
		p.tel.LeaseLost(ctx, sp)
		return false
	case coord.Outdated:
		return false
	case coord.Corrupt:
		p.tel.CorruptEntry(ctx, sp) // L1 needs no encoding: keep it there
	case coord.Failed:
		if !whole {
			p.failOpen(ctx, sp, "l2_set", err)
		}
		o.failOpen(err)
	}
	return true
}

func appendLease(ls []*backend.Lease, l *backend.Lease) []*backend.Lease {
	if l == nil {
		return ls
	}
	return append(ls, l)
}
