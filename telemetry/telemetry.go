package telemetry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// KeyMode says whether cache keys go on spans.
type KeyMode uint8

const (
	// KeysOff keeps keys off spans. It is the default: keys may be secrets.
	KeysOff KeyMode = iota
	// KeysHashed puts the first 16 hex digits of the key's SHA-256.
	KeysHashed
	// KeysRaw puts the key as it is.
	KeysRaw
)

// Config says where telemetry goes. The zero value uses the global
// providers and keeps keys off spans.
type Config struct {
	// TracerProvider creates the tracer.
	// default: otel.GetTracerProvider()
	TracerProvider trace.TracerProvider
	// MeterProvider creates the instruments.
	// default: otel.GetMeterProvider()
	MeterProvider metric.MeterProvider
	// Keys says whether keys go on spans.
	// default: KeysOff
	Keys KeyMode
	// HitSpans makes every call answered by the in-process cache start
	// its spans (the call's and the L1 lookup's), as other calls do, for
	// the sampler to decide on. By default such a call starts spans only
	// when the caller's context carries a sampled span: a hit on its own
	// is counted in the metrics, and costs no span, which even a sampler
	// that keeps nothing makes the SDK build.
	// default: false
	HitSpans bool
}

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
	keys     KeyMode
	hitSpans bool

	// PipelineAttr is herdguard.pipeline=<name>, built once.
	PipelineAttr attribute.KeyValue
	// Meter made the instruments; observable ones register with it.
	Meter metric.Meter
	Instruments
}

// New returns the instrumentation of the pipeline named pipeline, with the
// given instrumentation scope (the instrumenting package's import path).
func New(scope, version, pipeline string, c Config) (*Telemetry, error) {
	t := &Telemetry{keys: c.Keys, hitSpans: c.HitSpans, PipelineAttr: Pipeline.String(pipeline)}
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
// spans: when [Config.HitSpans] asks, or when ctx carries a sampled span.
func (t *Telemetry) HitSpans(ctx context.Context) bool {
	return t.hitSpans || trace.SpanContextFromContext(ctx).IsSampled()
}

// Start starts a span named name, or returns ctx and a nil span when
// tracing is off. End it with [End].
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
	case KeysRaw:
		return Key.String(key), true
	case KeysHashed:
		sum := sha256.Sum256([]byte(key))
		return Key.String(hex.EncodeToString(sum[:8])), true
	}
	return attribute.KeyValue{}, false
}
