// Package otelsetup installs an OTLP/HTTP trace exporter for the examples,
// when the environment asks for one.
//
// It follows the OpenTelemetry environment variables: nothing happens
// unless OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
// is set; the exporter reads the endpoint, headers, timeout and TLS settings
// from them itself; the service name comes from OTEL_SERVICE_NAME (or
// OTEL_RESOURCE_ATTRIBUTES), else from the caller's default.
//
//	OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_SERVICE_NAME=quickstart go run ./quickstart
package otelsetup

import (
	"context"
	"errors"
	"os"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Enabled reports whether the environment names an OTLP endpoint.
func Enabled() bool {
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Install sets the global TracerProvider to an SDK one that exports every
// span over OTLP/HTTP in batches, and the global propagator to W3C trace
// context and baggage, when [Enabled]. service is the service name to use
// when OTEL_SERVICE_NAME does not give one.
//
// The returned shutdown flushes the spans still buffered and stops the
// exporter; call it before the process exits, with a bounded context. When
// the environment names no endpoint, Install changes nothing and shutdown
// does nothing.
func Install(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	if !Enabled() {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, err
	}
	// Later options win: the environment overrides the default name.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		_ = exp.Shutdown(ctx)
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)),
	)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return tp.Shutdown, nil
}
