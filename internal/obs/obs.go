// Package obs is the pipeline's instrumentation: its tracer, its metric
// instruments, the scope and version they report ([Scope], [Version]),
// the checks that keep telemetry free when nothing records, and the
// recording of each event of the stages (events.go). Package
// telemetry holds what users see of it: span names, attribute keys,
// metric names and Config.
package obs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/herdguard/herdguard/internal/evlog"
	"github.com/herdguard/herdguard/telemetry"
)

// The global providers as they are before any SDK is installed. While
// otel.GetTracerProvider() still returns this value, no SDK is installed and
// spans would record nothing.
var (
	defaultTP = otel.GetTracerProvider()
	defaultMP = otel.GetMeterProvider()
)

// Telemetry is the instrumentation of one pipeline: its tracer, its
// instruments and its constant attributes. It is safe for concurrent use.
type Telemetry struct {
	tracer   trace.Tracer
	explicit bool // the TracerProvider came from Config
	tracing  bool // with explicit: whether it can record at all
	meterOn  bool // with an explicit MeterProvider: whether it can record
	meterExp bool
	keys     telemetry.KeyMode
	hitSpans bool

	// PipelineAttr is herdguard.pipeline=<name>, built once.
	PipelineAttr attribute.KeyValue
	// Meter made the instruments; observable ones register with it.
	Meter metric.Meter
	Instruments
	// Log writes the notable events to the user's logger; its zero value
	// logs nothing. The pipeline sets its Logger and Pipeline.
	Log evlog.Log
}

// New returns the instrumentation of the pipeline named pipeline, with the
// given instrumentation scope (the instrumenting package's import path).
func New(scope, version, pipeline string, c telemetry.Config) (*Telemetry, error) {
	t := &Telemetry{keys: c.Keys, hitSpans: c.HitSpans, PipelineAttr: telemetry.Pipeline.String(pipeline)}
	tp := c.TracerProvider
	if tp != nil {
		t.explicit = true
		t.tracing = !isNoopTP(tp)
	} else {
		tp = otel.GetTracerProvider()
	}
	t.tracer = tp.Tracer(scope, trace.WithInstrumentationVersion(version))

	mp := c.MeterProvider
	if mp != nil {
		t.meterExp = true
		t.meterOn = !isNoopMP(mp)
	} else {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(scope, metric.WithInstrumentationVersion(version))
	t.Meter = meter
	if err := t.Instruments.init(meter, t.PipelineAttr); err != nil {
		return nil, err
	}
	return t, nil
}

func isNoopTP(tp trace.TracerProvider) bool {
	switch tp.(type) {
	case tracenoop.TracerProvider, *tracenoop.TracerProvider:
		return true
	}
	return false
}

func isNoopMP(mp metric.MeterProvider) bool {
	switch mp.(type) {
	case metricnoop.MeterProvider, *metricnoop.MeterProvider:
		return true
	}
	return false
}

// Tracing reports whether spans can be recorded at all. It costs an atomic
// load, so callers check it before building attributes or starting spans.
func (t *Telemetry) Tracing() bool {
	if t.explicit {
		return t.tracing
	}
	return otel.GetTracerProvider() != defaultTP
}

// Metering reports whether measurements can be recorded at all.
func (t *Telemetry) Metering() bool {
	if t.meterExp {
		return t.meterOn
	}
	return otel.GetMeterProvider() != defaultMP
}

// Off reports whether neither spans nor measurements can be recorded: the
// hot path's one check.
func (t *Telemetry) Off() bool { return !t.Tracing() && !t.Metering() }

// HitSpans reports whether a call the in-process cache answered starts
// spans: when [telemetry.Config.HitSpans] asks, or when ctx carries a sampled span.
func (t *Telemetry) HitSpans(ctx context.Context) bool {
	return t.hitSpans || trace.SpanContextFromContext(ctx).IsSampled()
}

// Start starts a span named name, or returns ctx and a nil span when
// tracing is off.
func (t *Telemetry) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !t.Tracing() {
		return ctx, nil
	}
	return t.tracer.Start(ctx, name, opts...)
}

// KeyAttr returns the key attribute for key, and false when keys stay off
// spans.
func (t *Telemetry) KeyAttr(key string) (attribute.KeyValue, bool) {
	switch t.keys {
	case telemetry.KeysRaw:
		return telemetry.Key.String(key), true
	case telemetry.KeysHashed:
		sum := sha256.Sum256([]byte(key))
		return telemetry.Key.String(hex.EncodeToString(sum[:8])), true
	}
	return attribute.KeyValue{}, false
}

// Instruments are one pipeline's metric instruments, created once.
type Instruments struct {
	calls     metric.Int64ObservableCounter
	loads     metric.Int64Counter
	loadDur   metric.Float64Histogram
	lockWait  metric.Float64Histogram
	failOpens metric.Int64Counter
	fallbacks metric.Int64Counter
	breaker   metric.Int64Gauge
	corrupt   metric.Int64Counter
	dups      metric.Int64Counter
	pipeline  attribute.KeyValue
}

func (in *Instruments) init(m metric.Meter, pipeline attribute.KeyValue) error {
	in.pipeline = pipeline
	var err, e error
	in.calls, e = m.Int64ObservableCounter(telemetry.MetricCalls, metric.WithDescription("Calls by pipeline and by where the value came from."), metric.WithUnit("{call}"))
	err = errors.Join(err, e)
	in.loads, e = m.Int64Counter(telemetry.MetricLoads, metric.WithDescription("Loader calls by outcome."), metric.WithUnit("{call}"))
	err = errors.Join(err, e)
	in.loadDur, e = m.Float64Histogram(telemetry.MetricLoadDuration, metric.WithDescription("Duration of loader calls."), metric.WithUnit("s"))
	err = errors.Join(err, e)
	in.lockWait, e = m.Float64Histogram(telemetry.MetricLockWait, metric.WithDescription("Time spent waiting for a distributed lock or for the value it guards."), metric.WithUnit("s"))
	err = errors.Join(err, e)
	in.failOpens, e = m.Int64Counter(telemetry.MetricFailOpens, metric.WithDescription("Calls that went on without L2 or the lock because Redis failed."), metric.WithUnit("{call}"))
	err = errors.Join(err, e)
	in.fallbacks, e = m.Int64Counter(telemetry.MetricFallbacks, metric.WithDescription("Calls answered by the fallback chain, by reason."), metric.WithUnit("{call}"))
	err = errors.Join(err, e)
	in.breaker, e = m.Int64Gauge(telemetry.MetricBreakerState, metric.WithDescription("Breaker state: 0 closed, 1 half-open, 2 open."), metric.WithUnit("{state}"))
	err = errors.Join(err, e)
	in.corrupt, e = m.Int64Counter(telemetry.MetricCorrupt, metric.WithDescription("Cached bytes that did not decode and were treated as a miss."), metric.WithUnit("{entry}"))
	err = errors.Join(err, e)
	in.dups, e = m.Int64Counter(telemetry.MetricDuplicateLoads, metric.WithDescription("Loads of a key begun although another load of it was, or may have been, under way, by cause."), metric.WithUnit("{call}"))
	err = errors.Join(err, e)
	return err
}

// ObserveCalls reports the pipeline's calls as [telemetry.MetricCalls], read at
// each collection from counters the pipeline keeps anyway: read(i, open)
// is the number of calls served from sources[i], failed open or not, so
// far. A call records no measurement of its own: an L1 hit costs the
// same with a meter as without. The attribute sets are built once. The
// returned function stops the reporting.
func (in *Instruments) ObserveCalls(m metric.Meter, sources []string, read func(i int, failedOpen bool) uint64) (stop func() error, err error) {
	sets := make([][2]metric.ObserveOption, len(sources))
	for i, src := range sources {
		for j := range sets[i] {
			sets[i][j] = metric.WithAttributeSet(attribute.NewSet(in.pipeline, telemetry.Source.String(src), telemetry.FailedOpen.Bool(j == 1)))
		}
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for i := range sources {
			for j := range sets[i] {
				if n := read(i, j == 1); n > 0 {
					o.ObserveInt64(in.calls, int64(n), sets[i][j])
				}
			}
		}
		return nil
	}, in.calls)
	if err != nil {
		return nil, err
	}
	return reg.Unregister, nil
}

// Load records one loader call.
func (in *Instruments) Load(ctx context.Context, outcome string, took time.Duration) {
	o := metric.WithAttributes(in.pipeline, telemetry.Outcome.String(outcome))
	in.loads.Add(ctx, 1, o)
	in.loadDur.Record(ctx, took.Seconds(), o)
}

// LockWait records time spent waiting on the lock, by outcome.
func (in *Instruments) LockWait(ctx context.Context, outcome string, took time.Duration) {
	in.lockWait.Record(ctx, took.Seconds(), metric.WithAttributes(in.pipeline, telemetry.LockOutcome.String(outcome)))
}

// FailOpen counts one call that failed open, by reason.
func (in *Instruments) FailOpen(ctx context.Context, reason string) {
	in.failOpens.Add(ctx, 1, metric.WithAttributes(in.pipeline, telemetry.Reason.String(reason)))
}

// Fallback counts one call answered by the fallback chain.
func (in *Instruments) Fallback(ctx context.Context, source, reason string) {
	in.fallbacks.Add(ctx, 1, metric.WithAttributes(in.pipeline, telemetry.Source.String(source), telemetry.Reason.String(reason)))
}

// BreakerState records a breaker's state (0 closed, 1 half-open, 2 open).
func (in *Instruments) BreakerState(ctx context.Context, name string, state int64) {
	in.breaker.Record(ctx, state, metric.WithAttributes(in.pipeline, telemetry.BreakerName.String(name)))
}

// DuplicateLoads counts n duplicate loads of cause (see
// [telemetry.MetricDuplicateLoads]).
func (in *Instruments) DuplicateLoads(ctx context.Context, cause string, n int) {
	in.dups.Add(ctx, int64(n), metric.WithAttributes(in.pipeline, telemetry.Reason.String(cause)))
}

// Corrupt counts one cached entry that did not decode.
func (in *Instruments) Corrupt(ctx context.Context, tier string) {
	in.corrupt.Add(ctx, 1, metric.WithAttributes(in.pipeline, telemetry.Tier.String(tier)))
}

// DecryptFailed counts one cached entry that did not decrypt (sealed by a
// key the pipeline does not hold, altered, moved from another key, or
// stored in clear) as [telemetry.MetricCorrupt] with [telemetry.Reason] decrypt_failed.
func (in *Instruments) DecryptFailed(ctx context.Context, tier string) {
	in.corrupt.Add(ctx, 1, metric.WithAttributes(in.pipeline, telemetry.Tier.String(tier), telemetry.Reason.String(telemetry.ReasonDecryptFailed)))
}
