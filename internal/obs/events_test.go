package obs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/keyring"
	"github.com/herdguard/herdguard/telemetry"
)

// recorded is a Telemetry of the pipeline "p" whose spans, metrics and
// log are kept in memory.
type recorded struct {
	*Telemetry
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	log    *bytes.Buffer
}

func newRecorded(t *testing.T, keys telemetry.KeyMode) *recorded {
	t.Helper()
	r := &recorded{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader(), log: &bytes.Buffer{}}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	tel, err := New(Scope, "v", "p", telemetry.Config{TracerProvider: tp, MeterProvider: mp, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	tel.Log.Logger = slog.New(slog.NewTextHandler(r.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	tel.Log.Pipeline = "p"
	r.Telemetry = tel
	return r
}

// ended returns the ended spans by name; it fails unless there is one of
// each of names, and no other.
func (r *recorded) ended(t *testing.T, names ...string) map[string]sdktrace.ReadOnlySpan {
	t.Helper()
	out := map[string]sdktrace.ReadOnlySpan{}
	var got []string
	for _, s := range r.spans.Ended() {
		out[s.Name()] = s
		got = append(got, s.Name())
	}
	slices.Sort(got)
	slices.Sort(names)
	if !slices.Equal(got, names) {
		t.Fatalf("ended spans %v, want %v", got, names)
	}
	return out
}

// metrics returns each metric's data points as "name{k=v,...}" to a
// counter's or gauge's value, or to a histogram's count.
func (r *recorded) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					out[m.Name+attrs(dp.Attributes)] = float64(dp.Value)
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					out[m.Name+attrs(dp.Attributes)] = float64(dp.Value)
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					out[m.Name+attrs(dp.Attributes)] = float64(dp.Count)
				}
			}
		}
	}
	return out
}

func attrs(s attribute.Set) string {
	var kv []string
	for _, a := range s.ToSlice() {
		kv = append(kv, string(a.Key)+"="+a.Value.String())
	}
	return "{" + strings.Join(kv, ",") + "}"
}

// spanAttrs returns a span's attributes as "k=v".
func spanAttrs(s sdktrace.ReadOnlySpan) []string {
	var kv []string
	for _, a := range s.Attributes() {
		kv = append(kv, string(a.Key)+"="+a.Value.String())
	}
	slices.Sort(kv)
	return kv
}

func events(s sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, e := range s.Events() {
		out = append(out, e.Name)
	}
	return out
}

func wantAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want ...string) {
	t.Helper()
	slices.Sort(want)
	if got := spanAttrs(s); !slices.Equal(got, want) {
		t.Errorf("span %s has attributes %v, want %v", s.Name(), got, want)
	}
}

func wantEvents(t *testing.T, s sdktrace.ReadOnlySpan, want ...string) {
	t.Helper()
	if got := events(s); !slices.Equal(got, want) {
		t.Errorf("span %s has events %q, want %q", s.Name(), got, want)
	}
}

func wantMetrics(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("metrics\n%v\nwant\n%v", got, want)
	}
}

// TestStartCall: a call's span carries the pipeline and the key (when
// asked), and its L1 child records the lookup; without L1, no child;
// with tracing off, no span.
func TestStartCall(t *testing.T) {
	r := newRecorded(t, telemetry.KeysRaw)
	ctx, sp := r.StartCall(context.Background(), "user:1", true, false, "stale")
	if trace.SpanFromContext(ctx) != sp {
		t.Fatal("the returned context does not carry the call's span")
	}
	sp.End()
	got := r.ended(t, telemetry.SpanGet, telemetry.SpanL1)
	wantAttrs(t, got[telemetry.SpanGet], "herdguard.pipeline=p", "herdguard.key=user:1")
	wantAttrs(t, got[telemetry.SpanL1], "herdguard.cache.hit=false", "herdguard.cache.freshness=stale")
	if got[telemetry.SpanL1].Parent().SpanID() != got[telemetry.SpanGet].SpanContext().SpanID() {
		t.Error("the L1 span is not the call's child")
	}

	r = newRecorded(t, telemetry.KeysOff)
	_, sp = r.StartCall(context.Background(), "user:1", false, false, "miss")
	sp.End()
	wantAttrs(t, r.ended(t, telemetry.SpanGet)[telemetry.SpanGet], "herdguard.pipeline=p")

	off, err := New(Scope, "v", "p", telemetry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, sp := off.StartCall(context.Background(), "k", true, true, "fresh"); sp != nil {
		t.Fatal("a span with tracing off")
	}
}

// TestFinishCall: a call's outcome on its span and in the fallbacks
// metric: a fallback is an event, not an error; an error sets the
// status; not found is neither.
func TestFinishCall(t *testing.T) {
	cases := []struct {
		name    string
		c       Call
		attrs   []string
		events  []string
		status  codes.Code
		metrics map[string]float64
	}{
		{
			name:   "fallback",
			c:      Call{Source: "stale", FailedOpen: true, Fallback: "timeout"},
			attrs:  []string{"herdguard.source=stale", "herdguard.failed_open=true", "herdguard.fallback.used=true", "herdguard.fallback.reason=timeout"},
			events: []string{"fallback"},
			metrics: map[string]float64{
				telemetry.MetricFallbacks + "{herdguard.pipeline=p,herdguard.reason=timeout,herdguard.source=stale}": 1,
			},
		},
		{
			name:    "error",
			c:       Call{Source: "none", Err: errors.New("boom")},
			attrs:   []string{"herdguard.source=none", "herdguard.failed_open=false"},
			events:  []string{"exception"},
			status:  codes.Error,
			metrics: map[string]float64{},
		},
		{
			name:    "not found",
			c:       Call{Source: "loader", NotFound: true, Err: errors.New("not found")},
			attrs:   []string{"herdguard.source=loader", "herdguard.failed_open=false", "herdguard.not_found=true"},
			metrics: map[string]float64{},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRecorded(t, telemetry.KeysOff)
			_, sp := r.Start(context.Background(), telemetry.SpanGet)
			r.FinishCall(context.Background(), sp, tc.c)
			s := r.ended(t, telemetry.SpanGet)[telemetry.SpanGet]
			wantAttrs(t, s, tc.attrs...)
			wantEvents(t, s, tc.events...)
			if s.Status().Code != tc.status {
				t.Errorf("status %v, want %v", s.Status().Code, tc.status)
			}
			wantMetrics(t, r.metrics(t), tc.metrics)
		})
	}
	// Without a span, the metric alone.
	r := newRecorded(t, telemetry.KeysOff)
	r.FinishCall(context.Background(), nil, Call{Source: "default", Fallback: "error"})
	wantMetrics(t, r.metrics(t), map[string]float64{
		telemetry.MetricFallbacks + "{herdguard.pipeline=p,herdguard.reason=error,herdguard.source=default}": 1,
	})
}

// TestFinishBatch: a batch's span counts its keys by source, those that
// failed open and those that failed, whose errors set its status.
func TestFinishBatch(t *testing.T) {
	r := newRecorded(t, telemetry.KeysOff)
	_, sp := r.Start(context.Background(), "batch")
	r.FinishBatch(sp, []string{"none", "l1", "l2"}, []int{1, 2, 0}, 1, 1, errors.New("k: boom"))
	s := r.ended(t, "batch")["batch"]
	wantAttrs(t, s, "herdguard.keys.none=1", "herdguard.keys.l1=2", "herdguard.keys.failed_open=1",
		"herdguard.keys.failed=1", "herdguard.failed_open=true")
	if s.Status().Code != codes.Error || s.Status().Description != "k: boom" {
		t.Errorf("status %v, want the keys' error", s.Status())
	}

	r = newRecorded(t, telemetry.KeysOff)
	_, sp = r.Start(context.Background(), "batch")
	r.FinishBatch(sp, []string{"none", "l1"}, []int{0, 3}, 0, 0, nil)
	s = r.ended(t, "batch")["batch"]
	wantAttrs(t, s, "herdguard.keys.l1=3", "herdguard.keys.failed_open=0", "herdguard.keys.failed=0")
	if s.Status().Code != codes.Unset {
		t.Errorf("status %v, want unset", s.Status())
	}
	r.FinishBatch(nil, nil, nil, 0, 1, errors.New("no span")) // nothing to record
}

// TestShared: a joiner's single-flight span is marked shared and linked
// to the leader's; the leader's is not shared and has no link.
func TestShared(t *testing.T) {
	r := newRecorded(t, telemetry.KeysOff)
	_, lead := r.Start(context.Background(), "leader")
	_, join := r.Start(context.Background(), "joiner")
	Shared(lead, false, join.SpanContext()) // a leader links to nothing
	Shared(join, true, lead.SpanContext())
	Shared(nil, true, lead.SpanContext())
	lead.End()
	join.End()
	got := r.ended(t, "leader", "joiner")
	wantAttrs(t, got["leader"], "herdguard.singleflight.shared=false")
	wantAttrs(t, got["joiner"], "herdguard.singleflight.shared=true")
	if l := got["leader"].Links(); len(l) != 0 {
		t.Errorf("the leader has links %v", l)
	}
	if l := got["joiner"].Links(); len(l) != 1 || l[0].SpanContext.SpanID() != lead.SpanContext().SpanID() {
		t.Errorf("the joiner's links %v, want the leader's span", l)
	}
}

// TestFailedOpen: a fail-open marks its span (status unset), counts
// op:why, and is logged with op, why and the error's root cause.
func TestFailedOpen(t *testing.T) {
	r := newRecorded(t, telemetry.KeysOff)
	ctx, sp := r.Start(context.Background(), telemetry.SpanL2)
	r.FailedOpen(ctx, sp, "l2_get", "redis_error", fmt.Errorf("get k: %w", errors.New("connection refused")))
	r.FailedOpen(ctx, nil, "lock_acquire", "breaker_open", errors.New("open"))
	sp.End()
	s := r.ended(t, telemetry.SpanL2)[telemetry.SpanL2]
	wantAttrs(t, s, "herdguard.failed_open=true", "herdguard.fail_open.reason=redis_error")
	wantEvents(t, s, "failed open")
	if s.Status().Code != codes.Unset {
		t.Errorf("status %v, want unset", s.Status())
	}
	wantMetrics(t, r.metrics(t), map[string]float64{
		telemetry.MetricFailOpens + "{herdguard.pipeline=p,herdguard.reason=l2_get:redis_error}":        1,
		telemetry.MetricFailOpens + "{herdguard.pipeline=p,herdguard.reason=lock_acquire:breaker_open}": 1,
	})
	log := r.log.String()
	if !strings.Contains(log, `msg="herdguard: Redis failing; calls go on without it" pipeline=p op=l2_get reason=redis_error error="connection refused"`) {
		t.Errorf("log:\n%s", log)
	}
	if strings.Count(log, "\n") != 1 {
		t.Errorf("the second fail-open, inside the quiet minute, was logged:\n%s", log)
	}
}

// TestCorruptEntry: unusable data is an event on its span (without the
// error, which names the key), a count for L2, and logged.
func TestCorruptEntry(t *testing.T) {
	r := newRecorded(t, telemetry.KeysOff)
	ctx, sp := r.Start(context.Background(), telemetry.SpanL2)
	r.CorruptEntry(ctx, sp)
	r.CorruptEntry(ctx, nil)
	sp.End()
	s := r.ended(t, telemetry.SpanL2)[telemetry.SpanL2]
	wantEvents(t, s, "unusable data at the key; treated as a miss")
	wantAttrs(t, s)
	wantMetrics(t, r.metrics(t), map[string]float64{
		telemetry.MetricCorrupt + "{herdguard.pipeline=p,herdguard.tier=l2}": 2,
	})
	if !strings.Contains(r.log.String(), `level=WARN msg="herdguard: unusable data in Redis treated as a miss" pipeline=p`) {
		t.Errorf("log:\n%s", r.log)
	}
}

// TestLeaseLost: a lost lease is an event on the given span, or else on
// ctx's, a fail-open of l2_set, and logged.
func TestLeaseLost(t *testing.T) {
	r := newRecorded(t, telemetry.KeysOff)
	ctx, sp := r.Start(context.Background(), telemetry.SpanLock)
	_, wb := r.Start(ctx, telemetry.SpanWriteBack)
	r.LeaseLost(ctx, wb)
	r.LeaseLost(ctx, nil)
	wb.End()
	sp.End()
	got := r.ended(t, telemetry.SpanLock, telemetry.SpanWriteBack)
	for _, name := range []string{telemetry.SpanLock, telemetry.SpanWriteBack} {
		wantEvents(t, got[name], "lease lost before the write-back; value not written")
	}
	wantMetrics(t, r.metrics(t), map[string]float64{
		telemetry.MetricFailOpens + "{herdguard.pipeline=p,herdguard.reason=l2_set:lease_lost}": 2,
	})
	if !strings.Contains(r.log.String(), `msg="herdguard: a lock holder lost its lease before writing back; value not written" pipeline=p`) {
		t.Errorf("log:\n%s", r.log)
	}
}

// TestUndecodable: bytes that do not decode are counted as corrupt; those
// that did not decrypt with the reason decrypt_failed, and logged with
// the reason after keyring's prefix. Bytes that merely do not decode are
// not logged here: the read that meets them is (CorruptEntry).
func TestUndecodable(t *testing.T) {
	r := newRecorded(t, telemetry.KeysOff)
	r.Undecodable("k", errors.New("gob: bad data"))
	if r.log.Len() != 0 {
		t.Errorf("bytes that do not decode were logged:\n%s", r.log)
	}
	r.Undecodable("k", fmt.Errorf("%w: no key k2", keyring.ErrDecrypt))
	wantMetrics(t, r.metrics(t), map[string]float64{
		telemetry.MetricCorrupt + "{herdguard.pipeline=p,herdguard.tier=l2}":                                 1,
		telemetry.MetricCorrupt + "{herdguard.pipeline=p,herdguard.reason=decrypt_failed,herdguard.tier=l2}": 1,
	})
	if !strings.Contains(r.log.String(), `msg="herdguard: a value in Redis did not decrypt; treated as a miss" pipeline=p reason="no key k2"`) {
		t.Errorf("log:\n%s", r.log)
	}
}

// TestLockOutcome: a lock wait's outcome and duration on its span, with
// the fence of the lease won and whether it took the lock over, and in
// the lock-wait histogram.
func TestLockOutcome(t *testing.T) {
	r := newRecorded(t, telemetry.KeysOff)
	ctx, sp := r.Start(context.Background(), telemetry.SpanLock)
	lease := backend.NewLease(nil, backend.Grant{Key: "k", Token: "t", Fence: 7, TTL: time.Second, TookOver: true})
	r.LockOutcome(ctx, sp, "acquired", time.Now().Add(-1500*time.Millisecond), lease)
	r.LockOutcome(ctx, nil, "timeout", time.Now(), nil)
	sp.End()
	s := r.ended(t, telemetry.SpanLock)[telemetry.SpanLock]
	var waited float64
	for _, a := range s.Attributes() {
		if a.Key == telemetry.LockWaitMS {
			waited = a.Value.AsFloat64()
		}
	}
	if waited < 1500 {
		t.Errorf("wait_ms %v, want at least 1500", waited)
	}
	var rest []string
	for _, kv := range spanAttrs(s) {
		if !strings.HasPrefix(kv, string(telemetry.LockWaitMS)+"=") {
			rest = append(rest, kv)
		}
	}
	if want := []string{"herdguard.lock.fence=7", "herdguard.lock.outcome=acquired"}; !slices.Equal(rest, want) {
		t.Errorf("attributes %v, want %v and the wait", rest, want)
	}
	wantEvents(t, s, "took the lock over from a holder that stopped beating")
	wantMetrics(t, r.metrics(t), map[string]float64{
		telemetry.MetricLockWait + "{herdguard.lock.outcome=acquired,herdguard.pipeline=p}": 1,
		telemetry.MetricLockWait + "{herdguard.lock.outcome=timeout,herdguard.pipeline=p}":  1,
	})
}

// TestBreakerChanged: a transition is logged (WARN when it opens) and
// sets the breaker's gauge.
func TestBreakerChanged(t *testing.T) {
	r := newRecorded(t, telemetry.KeysOff)
	r.BreakerChanged("redis", breaker.Closed, breaker.Open)
	wantMetrics(t, r.metrics(t), map[string]float64{
		telemetry.MetricBreakerState + "{herdguard.breaker.name=redis,herdguard.pipeline=p}": 2,
	})
	r.BreakerChanged("redis", breaker.Open, breaker.HalfOpen)
	wantMetrics(t, r.metrics(t), map[string]float64{
		telemetry.MetricBreakerState + "{herdguard.breaker.name=redis,herdguard.pipeline=p}": 1,
	})
	log := r.log.String()
	for _, want := range []string{
		`level=WARN msg="herdguard: breaker changed state" pipeline=p breaker=redis from=closed to=open`,
		`level=INFO msg="herdguard: breaker changed state" pipeline=p breaker=redis from=open to=half-open`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}
