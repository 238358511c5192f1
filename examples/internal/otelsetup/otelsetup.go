// Package otelsetup installs OpenTelemetry trace and metric exporters for
// the examples and the stampede harness, when the environment asks for
// them, and go-redis's OpenTelemetry tracing on their Redis clients.
//
// It follows the OpenTelemetry environment variables, through
// go.opentelemetry.io/contrib/exporters/autoexport: nothing happens unless
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), or
// OTEL_TRACES_EXPORTER, names where to send them, and then no SDK is even
// built. OTEL_TRACES_EXPORTER and OTEL_METRICS_EXPORTER choose the
// exporters (otlp by default; console; none; prometheus for metrics),
// OTEL_EXPORTER_OTLP_PROTOCOL the protocol (http/protobuf by default, or
// grpc), and the exporters read the endpoint, headers, timeout and TLS
// settings themselves; the service name comes from OTEL_SERVICE_NAME (or
// OTEL_RESOURCE_ATTRIBUTES), else from the caller's default. A receiver
// that takes traces only (Jaeger, Tempo) answers the metrics with 404:
// then one line says so, instead of an error at every export; set
// OTEL_METRICS_EXPORTER=none to send none.
//
//	OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_SERVICE_NAME=quickstart go run ./quickstart
package otelsetup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Enabled reports whether the environment names an OTLP endpoint or
// chooses a trace exporter.
func Enabled() bool {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER"} {
		if os.Getenv(v) != "" {
			return true
		}
	}
	return false
}

// Install sets the global TracerProvider to an SDK one that exports every
// span in batches, the global MeterProvider to one that exports the
// metrics (every OTEL_METRIC_EXPORT_INTERVAL, 60 s by default), each
// unless its exporter is "none", and the global propagator to W3C trace
// context and baggage, when [Enabled]. service is the service name to use
// when OTEL_SERVICE_NAME does not give one.
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
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, err
	}
	reader, err := autoexport.NewMetricReader(ctx)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, err
	}
	otel.SetErrorHandler(&quietRefusals{w: os.Stderr})
	var shutdowns []func(context.Context) error
	if autoexport.IsNoneSpanExporter(exp) {
		_ = exp.Shutdown(ctx)
	} else {
		tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithBatcher(exp))
		otel.SetTracerProvider(tp)
		shutdowns = append(shutdowns, tp.Shutdown)
	}
	if autoexport.IsNoneMetricReader(reader) {
		_ = reader.Shutdown(ctx)
	} else {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(reader))
		otel.SetMeterProvider(mp)
		shutdowns = append(shutdowns, mp.Shutdown)
	}
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return func(ctx context.Context) error {
		var errs []error
		for _, f := range shutdowns {
			errs = append(errs, quiet(f(ctx)))
		}
		return errors.Join(errs...)
	}, nil
}

// quietRefusals is the OpenTelemetry error handler: it prints every
// error, except that an endpoint refusing a whole signal (404: a Jaeger or
// Tempo that takes traces but no metrics) is said once, not at every
// export.
type quietRefusals struct {
	w    io.Writer
	mu   sync.Mutex // guards told
	told bool
}

func (h *quietRefusals) Handle(err error) {
	if !refused(err) {
		fmt.Fprintln(h.w, "opentelemetry:", err)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.told {
		h.told = true
		fmt.Fprintln(h.w, "opentelemetry: the endpoint does not take this signal (404); set OTEL_METRICS_EXPORTER=none or OTEL_TRACES_EXPORTER=none to stop sending it")
	}
}

// refused reports whether err is an endpoint's 404 for a signal: the
// OTLP/HTTP exporters quote the response's status line.
func refused(err error) bool {
	return err != nil && strings.Contains(err.Error(), "404 Not Found")
}

// quiet is err, or nil when it is an endpoint's refusal of a signal: the
// last export at shutdown must not fail the program for it.
func quiet(err error) error {
	if refused(err) {
		return nil
	}
	return err
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
