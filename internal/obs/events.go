package obs

import (
	"context"
	"errors"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/keyring"
	"github.com/herdguard/herdguard/telemetry"
)

// The events of a pipeline's stages, each recorded by one call: on the
// stage's span when there is one, in the metrics when a meter records,
// and in the event log (Telemetry.Log) for those the user's logger hears.
// The stages decide what happened; these only record it.

// The attributes of a batch's span.
var (
	attrFailedKeys = attribute.Key("herdguard.keys.failed")
	attrOpenKeys   = attribute.Key("herdguard.keys.failed_open")
)

// StartCall starts the span of a call that L1 could not answer alone, and
// returns ctx with it; with withL1, a child span records the L1 lookup
// just made: whether it hit (fresh) and the freshness it found. The span
// is nil when tracing is off.
func (t *Telemetry) StartCall(ctx context.Context, key string, withL1, fresh bool, freshness string) (context.Context, trace.Span) {
	if !t.Tracing() {
		return ctx, nil
	}
	ctx, sp := t.Start(ctx, telemetry.SpanGet)
	if sp.IsRecording() {
		sp.SetAttributes(t.PipelineAttr)
		if kv, ok := t.KeyAttr(key); ok {
			sp.SetAttributes(kv)
		}
	}
	if withL1 {
		_, l1sp := t.Start(ctx, telemetry.SpanL1)
		if l1sp.IsRecording() {
			l1sp.SetAttributes(telemetry.Hit.Bool(fresh), telemetry.Freshness.String(freshness))
		}
		l1sp.End()
	}
	return ctx, sp
}

// Call is what a call returned, as its span and the metrics record it.
type Call struct {
	Source     string // where the value came from
	FailedOpen bool
	NotFound   bool
	Fallback   string // why the fallback chain answered; "" when it did not
	Err        error
}

// FinishCall records a call's outcome c in the metrics and on its span
// sp (if any), and ends sp.
func (t *Telemetry) FinishCall(ctx context.Context, sp trace.Span, c Call) {
	if c.Fallback != "" {
		t.FellBack(ctx, c.Source, c.Fallback)
	}
	if sp == nil {
		return
	}
	if !sp.IsRecording() {
		sp.End()
		return
	}
	sp.SetAttributes(telemetry.Source.String(c.Source), telemetry.FailedOpen.Bool(c.FailedOpen))
	if c.NotFound {
		sp.SetAttributes(telemetry.NotFound.Bool(true))
	}
	if c.Fallback != "" {
		// Handled: the caller got a value. The cause is an event, not an
		// error status.
		sp.SetAttributes(telemetry.Fallback.Bool(true), telemetry.FallbackReason.String(c.Fallback))
		sp.AddEvent("fallback", trace.WithAttributes(telemetry.FallbackReason.String(c.Fallback)))
	}
	if c.Err != nil && !c.NotFound {
		sp.RecordError(c.Err)
		sp.SetStatus(codes.Error, c.Err.Error())
	}
	sp.End()
}

// FellBack counts a call the fallback chain answered from source, for
// reason why.
func (t *Telemetry) FellBack(ctx context.Context, source, why string) {
	if t.Metering() {
		t.Fallback(ctx, source, why)
	}
}

// FinishBatch records a batch's outcome on its span sp (if any), and ends
// sp: the count of keys served from each source (counts[i] from
// sources[i], none when 0), of keys that failed open (open) and of keys
// that failed (failed, err their errors). Each key's metrics are
// recorded as a call's (FellBack).
func (t *Telemetry) FinishBatch(sp trace.Span, sources []string, counts []int, open, failed int, err error) {
	if sp == nil {
		return
	}
	for i, n := range counts {
		if n > 0 {
			sp.SetAttributes(attribute.Int("herdguard.keys."+sources[i], n))
		}
	}
	sp.SetAttributes(attrOpenKeys.Int(open), attrFailedKeys.Int(failed))
	if open > 0 {
		sp.SetAttributes(telemetry.FailedOpen.Bool(true))
	}
	if failed > 0 {
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}

// Shared records on a caller's single-flight span sp (if any) whether it
// joined another's load, and links a joiner to the leader's span, lead.
func Shared(sp trace.Span, joiner bool, lead trace.SpanContext) {
	if sp == nil {
		return
	}
	sp.SetAttributes(telemetry.Shared.Bool(joiner))
	if joiner && lead.IsValid() {
		sp.AddLink(trace.Link{SpanContext: lead})
	}
}

// FailedOpen records that a call went on without Redis (or the backend,
// or the lock): op is the operation that failed, why the reason, err its
// error. The span sp, if any, keeps its status unset: the call goes on.
func (t *Telemetry) FailedOpen(ctx context.Context, sp trace.Span, op, why string, err error) {
	if sp != nil {
		sp.SetAttributes(telemetry.FailedOpen.Bool(true), telemetry.FailOpenReason.String(why))
		sp.AddEvent("failed open", trace.WithAttributes(telemetry.FailOpenReason.String(why)))
	}
	if t.Metering() {
		t.FailOpen(ctx, op+":"+why)
	}
	t.Log.FailedOpen(ctx, op, why, err)
}

// CorruptEntry records a per-key data problem in L2, treated as a miss.
// The error is not recorded: it names the key, and keys stay off spans
// unless asked.
func (t *Telemetry) CorruptEntry(ctx context.Context, sp trace.Span) {
	if sp != nil {
		sp.AddEvent("unusable data at the key; treated as a miss")
	}
	if t.Metering() {
		t.Corrupt(ctx, "l2")
	}
	t.Log.CorruptEntry(ctx)
}

// LeaseLost records a lock holder that found its lease gone before
// writing back: on sp, or else on ctx's span.
func (t *Telemetry) LeaseLost(ctx context.Context, sp trace.Span) {
	if sp == nil {
		sp = trace.SpanFromContext(ctx)
	}
	sp.AddEvent("lease lost before the write-back; value not written")
	if t.Metering() {
		t.FailOpen(ctx, "l2_set:lease_lost")
	}
	t.Log.LostLease(ctx)
}

// Undecodable hears the L2 store's reads of bytes that do not decode (the
// store's OnCorrupt): each is counted, and one that did not decrypt is
// also logged (see decryptFailed).
func (t *Telemetry) Undecodable(_ string, err error) {
	if t.decryptFailed(err) {
		return
	}
	if t.Metering() {
		t.Corrupt(context.Background(), "l2")
	}
}

// decryptFailed records an L2 entry that did not decrypt, and reports
// whether err was one: a miss, counted as herdguard.cache.corrupt with
// herdguard.reason=decrypt_failed, and logged (at most once a minute, with the
// corrupt entries) with the reason, which names key ids and never keys
// or key material. It is the first sign of a rotation step deployed out of
// order.
func (t *Telemetry) decryptFailed(err error) bool {
	if !errors.Is(err, keyring.ErrDecrypt) {
		return false
	}
	ctx := context.Background()
	if t.Metering() {
		t.DecryptFailed(ctx, "l2")
	}
	t.Log.DecryptFailed(ctx, strings.TrimPrefix(err.Error(), keyring.ErrDecrypt.Error()+": "))
	return true
}

// LockOutcome records how a wait on the lock that began at start ended
// (acquired, waited, timeout, failed_open): on the lock span sp, if any,
// with the fence of lease, the lease won, if any; and in the lock-wait
// histogram.
func (t *Telemetry) LockOutcome(ctx context.Context, sp trace.Span, outcome string, start time.Time, lease *backend.Lease) {
	waited := time.Since(start)
	if sp != nil {
		sp.SetAttributes(telemetry.LockOutcome.String(outcome), telemetry.LockWaitMS.Float64(float64(waited)/float64(time.Millisecond)))
		if lease != nil {
			sp.SetAttributes(telemetry.LockFence.Int64(lease.Fence()))
			if lease.TookOver() {
				sp.AddEvent("took the lock over from a holder that stopped beating")
			}
		}
	}
	if t.Metering() {
		t.LockWait(ctx, outcome, waited)
	}
}

// BreakerChanged records a breaker's transition: logged, and its state
// in the breaker-state gauge.
func (t *Telemetry) BreakerChanged(name string, from, to breaker.State) {
	t.Log.BreakerChange(name, from, to)
	if t.Metering() {
		t.BreakerState(context.Background(), name, int64(to))
	}
}
