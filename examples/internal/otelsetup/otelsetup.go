// Package otelsetup installs OTLP/HTTP trace and metric exporters for the
// examples and the stampede harness, when the environment asks for them,
// and go-redis's OpenTelemetry tracing on their Redis clients.
//
// It follows the OpenTelemetry environment variables: nothing happens
// unless OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
// is set, and then no SDK is even built; the exporters read the endpoint,
// headers, timeout and TLS settings from them themselves; the service name
// comes from OTEL_SERVICE_NAME (or OTEL_RESOURCE_ATTRIBUTES), else from the
// caller's default. OTEL_METRICS_EXPORTER=none keeps metrics home (for a
// receiver that takes traces only).
//
//	OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_SERVICE_NAME=quickstart go run ./quickstart
package otelsetup

import (
	"context"
	"errors"
	"net/http"
	"os"
	"time"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Enabled reports whether the environment names an OTLP endpoint.
func Enabled() bool {
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Install sets the global TracerProvider to an SDK one that exports every
// span over OTLP/HTTP in batches, the global MeterProvider to one that
// exports the metrics every 10 seconds (unless OTEL_METRICS_EXPORTER is
// "none"), and the global propagator to W3C trace context and baggage,
// when [Enabled]. service is the service name to use when
// OTEL_SERVICE_NAME does not give one.
//
// The returned shutdown flushes the spans and metrics still buffered and
// stops the exporters; call it before the process exits, with a bounded
// context. When the environment names no endpoint, Install changes nothing
// and shutdown does nothing.
func Install(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	if !Enabled() {
		return func(context.Context) error { return nil }, nil
	}
	// Later options win: the environment overrides the default name.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)),
	)
	shutdowns := []func(context.Context) error{tp.Shutdown}
	if os.Getenv("OTEL_METRICS_EXPORTER") != "none" {
		mexp, err := otlpmetrichttp.New(ctx)
		if err != nil {
			_ = tp.Shutdown(ctx)
			return nil, err
		}
		mp := sdkmetric.NewMeterProvider(
			sdkmetric.WithResource(res),
			sdkmetric.WithReader(sdkmetric.NewPeriodicReader(mexp, sdkmetric.WithInterval(10*time.Second))),
		)
		otel.SetMeterProvider(mp)
		shutdowns = append(shutdowns, mp.Shutdown)
	}
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return func(ctx context.Context) error {
		var errs []error
		for _, f := range shutdowns {
			errs = append(errs, f(ctx))
		}
		return errors.Join(errs...)
	}, nil
}

// Redis adds go-redis's OpenTelemetry tracing (redisotel) to client when
// [Enabled], after [Install]: a client span for every command and every
// pipelined batch, named after its commands ("evalsha", "hget",
// "redis.pipeline evalsha hget"), which the pipeline's own stage spans do
// not show. The statements stay off the spans: they would carry keys and
// values. Without an endpoint it does nothing.
func Redis(client redis.UniversalClient) error {
	if !Enabled() {
		return nil
	}
	return redisotel.InstrumentTracing(client, redisotel.WithDBStatement(false), redisotel.WithCallerEnabled(false))
}

// HTTPTransport wraps rt with otelhttp's client instrumentation when
// [Enabled], after [Install]: a client span per request that rt sends (for
// httpx, one per attempt, so retries show). Without an endpoint it returns
// rt as it is.
func HTTPTransport(rt http.RoundTripper) http.RoundTripper {
	if !Enabled() {
		return rt
	}
	return otelhttp.NewTransport(rt)
}
