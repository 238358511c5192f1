package otelsetup

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
)

// TestInstall_tracesOnlyEndpoint: an endpoint that takes traces and
// answers metrics with 404 (Jaeger, Tempo) fails no shutdown, and the
// handler says so once, not at every export.
func TestInstall_tracesOnlyEndpoint(t *testing.T) {
	var refusedMetrics atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/metrics" {
			refusedMetrics.Add(1)
			http.NotFound(w, r)
			return
		}
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	shutdown, err := Install(context.Background(), "svc")
	if err != nil {
		t.Fatal(err)
	}
	counter, err := otel.Meter("test").Int64Counter("refused.counter")
	if err != nil {
		t.Fatal(err)
	}
	counter.Add(context.Background(), 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatalf("shutdown against a traces-only endpoint: %v, want nil", err)
	}
	if refusedMetrics.Load() == 0 {
		t.Fatal("no metrics were sent: the test proves nothing")
	}
}

// TestQuietRefusals_saysARefusalOnce: of many refusals, one line; every
// other error as it comes.
func TestQuietRefusals_saysARefusalOnce(t *testing.T) {
	var out strings.Builder
	h := &quietRefusals{w: &out}
	refusal := errors.New("failed to upload metrics: failed to send metrics to http://127.0.0.1:4318/v1/metrics: 404 Not Found (body: )")
	for range 3 {
		h.Handle(refusal)
	}
	h.Handle(errors.New("connection refused"))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "does not take") || !strings.Contains(lines[1], "connection refused") {
		t.Fatalf("handler printed %q, want one line for the refusals and one for the other error", lines)
	}
}
