// Package telemetry holds the OpenTelemetry instrumentation of the toolkit:
// the span names and attribute keys, the metric instruments, and the cheap
// checks that keep the hot path free of allocations when no SDK is
// installed.
//
// It follows the OpenTelemetry contrib conventions: a [Config] takes a
// TracerProvider and a MeterProvider (the globals by default), never a Tracer
// or a Meter; the scope name is the instrumenting package's import path;
// tracers and instruments are created once.
//
// Keys may be secrets, so they are not put on spans unless [Config.Keys]
// asks for it.
package telemetry
