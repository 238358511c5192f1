package telemetry

import (
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
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
