package resilience

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/telemetry"
)

// l2Get reads key from L2 (Redis or the backend) through the guard, with
// a client span.
// A per-key data problem is a miss (counted); an error means the call
// fails open: it goes on without L2.
func (p *Pipeline[V]) l2Get(ctx context.Context, key string) (cache.Entry[V], cache.Freshness, error) {
	var sp trace.Span
	if p.tel.Tracing() {
		ctx, sp = p.tel.Start(ctx, telemetry.SpanL2, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(p.l2Attrs("HGET", "Load")...))
		defer sp.End()
	}
	type got struct {
		e cache.Entry[V]
		f cache.Freshness
	}
	g, err := guard(ctx, p.redisGuard, func(ctx context.Context) (got, error) {
		e, f, err := p.l2.Get(ctx, key)
		return got{e, f}, err
	})
	if err != nil && classify(ctx, err) == errData {
		p.corrupt(ctx, sp, err)
		g, err = got{f: cache.Miss}, nil
	}
	if sp != nil {
		sp.SetAttributes(telemetry.Hit.Bool(g.f == cache.Fresh), telemetry.Freshness.String(g.f.String()))
	}
	if err != nil {
		p.failOpen(ctx, sp, "l2_get", err)
	}
	return g.e, g.f, err
}

// corrupt records a per-key data problem in L2: treated as a miss.
func (p *Pipeline[V]) corrupt(ctx context.Context, sp trace.Span, err error) {
	if sp != nil {
		// The error is not attached: it names the key, and keys stay off
		// spans unless asked.
		sp.AddEvent("unusable data at the key; treated as a miss")
	}
	if p.tel.Metering() {
		p.tel.Corrupt(ctx, "l2")
	}
	p.logs.corruptEntry(ctx)
}

// failOpen records that a call went on without Redis.
func (p *Pipeline[V]) failOpen(ctx context.Context, sp trace.Span, op string, err error) {
	why := p.co.failReason()
	if classify(ctx, err) == errRefused {
		why = "breaker_open"
	} else if isDenied(err) {
		why = "redis_denied" // misconfigured: credentials or ACL
	}
	if sp != nil {
		sp.SetAttributes(telemetry.FailedOpen.Bool(true), telemetry.FailOpenReason.String(why))
		sp.AddEvent("failed open", trace.WithAttributes(telemetry.FailOpenReason.String(why)))
		// Handled: the call goes on. The span keeps its status unset.
	}
	if p.tel.Metering() {
		p.tel.FailOpen(ctx, op+":"+why)
	}
	p.logs.failedOpen(ctx, op, why, err)
}

// store writes a loaded entry to L2 and L1. Under a grant, the write goes
// through only while the lease still holds (a holder that lost it writes
// nothing, since a newer load may already have landed) and only above the
// stored entry's fence. A write refused either way leaves L1 alone too: a
// newer value exists, or may.
func (p *Pipeline[V]) store(ctx context.Context, key string, e cache.Entry[V], g *grant, o *outcome[V]) {
	if g != nil && g.lost.Load() {
		p.leaseLost(ctx, nil)
		return
	}
	if p.l2 != nil && !o.res.FailedOpen {
		var sp trace.Span
		if p.tel.Tracing() {
			ctx, sp = p.tel.Start(ctx, telemetry.SpanWriteBack, trace.WithSpanKind(trace.SpanKindClient),
				trace.WithAttributes(p.l2Attrs("EVALSHA", "Save", telemetry.LockFence.Int64(e.Fence))...))
			defer sp.End()
		}
		// With L2, a grant is always of L2's own lock (Redis's, or the
		// backend's): the embedded default's lock has no L2.
		stored, err := guard(ctx, p.redisGuard, func(ctx context.Context) (bool, error) {
			if g != nil {
				// The holder's last step, in one round trip: write while
				// its token holds the lock, release, announce.
				return p.co.commit(ctx, key, e, g.lease.Token())
			}
			return p.l2.Set(ctx, key, e)
		})
		if g != nil && err == nil {
			g.lease.Forget() // released by the commit
			g.released = true
		}
		switch {
		case errors.Is(err, cache.ErrLockLost):
			p.leaseLost(ctx, sp)
			return
		case errors.Is(err, cache.ErrExpiredEntry):
			// Nothing to keep: the entry's grace ended while it loaded.
		case err != nil && classify(ctx, err) == errData:
			p.corrupt(ctx, sp, err) // L1 needs no encoding: keep it there
		case err != nil:
			o.failOpen(err)
			p.failOpen(ctx, sp, "l2_set", err)
		case !stored:
			if sp != nil {
				sp.AddEvent("write refused: a newer fence wrote the key")
				sp.SetStatus(codes.Unset, "")
			}
			return
		}
	}
	p.fillL1(key, e, o)
}

// leaseLost records a holder that found its lease gone before writing.
func (p *Pipeline[V]) leaseLost(ctx context.Context, sp trace.Span) {
	if sp == nil {
		sp = trace.SpanFromContext(ctx)
	}
	sp.AddEvent("lease lost before the write-back; value not written")
	if p.tel.Metering() {
		p.tel.FailOpen(ctx, "l2_set:lease_lost")
	}
	p.logs.lostLease(ctx)
}

// decryptFailed records an L2 entry that did not decrypt, and reports
// whether err was one: a miss, counted as herdguard.cache.corrupt with
// herdguard.reason=decrypt_failed, and logged (at most once a minute, with the
// corrupt entries) with the reason, which names key ids and never keys
// or key material. It is the first sign of a rotation step deployed out of
// order.
func (p *Pipeline[V]) decryptFailed(err error) bool {
	if !errors.Is(err, cache.ErrDecrypt) {
		return false
	}
	ctx := context.Background()
	if p.tel.Metering() {
		p.tel.DecryptFailed(ctx, "l2")
	}
	p.logs.episode(ctx, &p.logs.corrupt, slog.LevelWarn, "herdguard: a value in Redis did not decrypt; treated as a miss",
		"reason", strings.TrimPrefix(err.Error(), cache.ErrDecrypt.Error()+": "))
	return true
}
