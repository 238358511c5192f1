// Package telemetry names what the toolkit's OpenTelemetry instrumentation
// emits, for dashboards, alerts and tests: the span names (one per stage),
// the attribute keys, the metric names; and [Config], which says where the
// telemetry goes. Every name it exports is one of those, so that a query
// can be written against a constant rather than a string copied from the
// docs; the instrumentation itself is the pipeline's own.
//
// It follows the OpenTelemetry contrib conventions: a [Config] takes a
// TracerProvider and a MeterProvider (the globals by default), never a Tracer
// or a Meter; the scope name is the instrumenting package's import path;
// tracers and instruments are created once, per pipeline.
//
// Keys may be secrets, so they are not put on spans unless [Config.Keys]
// asks for it.
//
// # Exported names
//
// Every constant and variable here is a name the instrumentation emits:
// the Span* names, the attribute keys (with [DBSystemRedis], and the
// Reason* values), the Metric* names. Users who write dashboards, alerts
// or tests against the telemetry need them. Users who point the telemetry
// somewhere need [Config] and [KeyMode] (KeysOff, KeysHashed, KeysRaw).
package telemetry
