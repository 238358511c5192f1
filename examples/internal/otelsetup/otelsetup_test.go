package otelsetup

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
)

func TestInstall_withoutEndpoint_changesNothing(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	before := otel.GetTracerProvider()
	shutdown, err := Install(context.Background(), "svc")
	if err != nil {
		t.Fatal(err)
	}
	if otel.GetTracerProvider() != before {
		t.Fatal("Install set a TracerProvider with no endpoint")
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestInstall_exportsOverOTLPHTTP runs last in this package: it installs
// the global provider for good.
func TestInstall_exportsOverOTLPHTTP(t *testing.T) {
	var mu sync.Mutex
	var bodies [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		if r.URL.Path == "/v1/traces" {
			bodies = append(bodies, b)
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "svc-from-env")
	shutdown, err := Install(context.Background(), "svc-default")
	if err != nil {
		t.Fatal(err)
	}
	_, sp := otel.Tracer("test").Start(context.Background(), "hello-span")
	sp.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	all := bytes.Join(bodies, nil)
	for _, want := range []string{"hello-span", "svc-from-env"} {
		if !bytes.Contains(all, []byte(want)) {
			t.Fatalf("the exported spans (%d requests) lack %q", len(bodies), want)
		}
	}
	if bytes.Contains(all, []byte("svc-default")) {
		t.Fatal("OTEL_SERVICE_NAME did not override the default service name")
	}
}
