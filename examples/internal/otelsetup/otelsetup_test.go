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

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"

	"github.com/herdguard/herdguard/internal/redistest"
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
	if HTTPTransport(http.DefaultTransport) != http.DefaultTransport {
		t.Fatal("HTTPTransport wrapped the transport with no endpoint")
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	if err := Redis(c); err != nil {
		t.Fatal(err)
	}
}

// TestInstall_exportsOverOTLPHTTP runs last in this package: it installs
// the global provider for good.
func TestInstall_exportsOverOTLPHTTP(t *testing.T) {
	var mu sync.Mutex
	var bodies, metrics [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		switch r.URL.Path {
		case "/v1/traces":
			bodies = append(bodies, b)
		case "/v1/metrics":
			metrics = append(metrics, b)
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
	counter, err := otel.Meter("test").Int64Counter("hello.counter")
	if err != nil {
		t.Fatal(err)
	}
	counter.Add(context.Background(), 1)
	// An HTTP client gets a span per request.
	resp, err := (&http.Client{Transport: HTTPTransport(http.DefaultTransport)}).Get(srv.URL + "/ping")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// A Redis client gets a span per command, named after it, and one per
	// pipelined batch.
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Start(t).Addr()})
	defer rdb.Close()
	if err := Redis(rdb); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HGet(context.Background(), "k", "f").Err(); err != redis.Nil {
		t.Fatal(err)
	}
	if _, err := rdb.Pipelined(context.Background(), func(p redis.Pipeliner) error {
		p.Publish(context.Background(), "ch", "m")
		p.Ping(context.Background())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	all := bytes.Join(bodies, nil)
	for _, want := range []string{"hello-span", "svc-from-env", "hget", "redis.pipeline publish ping", "http.request.method"} {
		if !bytes.Contains(all, []byte(want)) {
			t.Fatalf("the exported spans (%d requests) lack %q", len(bodies), want)
		}
	}
	if !bytes.Contains(bytes.Join(metrics, nil), []byte("hello.counter")) {
		t.Fatalf("the exported metrics (%d requests) lack hello.counter", len(metrics))
	}
	if bytes.Contains(all, []byte("svc-default")) {
		t.Fatal("OTEL_SERVICE_NAME did not override the default service name")
	}
}
