// Command http wraps a flaky upstream with package httpx and shows what a
// caller sees: retries on 503, a 429 whose Retry-After is honoured, a slow
// response cut by the attempt timeout, the host's breaker opening, and the
// fallback answering while it is open.
//
// The upstream is a local server on 127.0.0.1 that follows a script, so
// that every run tells the same story.
//
//	go run ./http
//
// With OTEL_EXPORTER_OTLP_ENDPOINT set (e.g. http://127.0.0.1:4318), it
// exports its traces and metrics over OTLP/HTTP.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/examples/internal/otelsetup"
	"github.com/herdguard/herdguard/resilience/httpx"
)

// step is one scripted answer of the upstream.
type step struct {
	status     int
	retryAfter string
	body       string
	slow       bool // hang until the client gives up
}

// script is what the upstream answers to its hits, in order; past its end
// it answers 500.
var script = []step{
	{status: 503}, {status: 503}, {status: 200, body: "v1"}, // call 1: retried twice
	{status: 429, retryAfter: "1"}, {status: 200, body: "v2"}, // call 2: waits 1 second
	{slow: true}, {status: 500}, {status: 500}, // call 3: three failures open the breaker
}

// calls is how many GETs run sends; the last finds the breaker open.
const calls = 4

// Config configures [run].
type Config struct {
	// AttemptTimeout bounds each attempt; the slow step outlasts it.
	AttemptTimeout time.Duration
}

// Call is what one GET got.
type Call struct {
	Status   int
	Body     string
	Hits     int32 // upstream hits the call caused
	Fallback bool  // the fallback answered
	Cause    error // why the fallback answered
}

// Report is what [run] observed.
type Report struct {
	Calls []Call
	// Hits is how many requests reached the upstream.
	Hits int32
	// Transitions lists the breaker's state changes, as "from->to".
	Transitions []string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	// Traces and metrics go to an OTLP endpoint only when
	// OTEL_EXPORTER_OTLP_ENDPOINT is set.
	shutdown, err := otelsetup.Install(ctx, "http-example")
	if err != nil {
		log.Fatal(err)
	}
	_, err = run(ctx, Config{AttemptTimeout: 200 * time.Millisecond}, os.Stdout)
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if serr := shutdown(sctx); serr != nil {
		log.Print(serr)
	}
	if err != nil {
		log.Fatal(err) //nolint:gocritic // cancel has nothing left to release
	}
}

// flaky is the scripted upstream.
type flaky struct {
	hits atomic.Int32
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := int(f.hits.Add(1)) - 1
	s := step{status: 500}
	if n < len(script) {
		s = script[n]
	}
	if s.slow {
		select {
		case <-r.Context().Done(): // the client's attempt timed out
		case <-time.After(time.Minute):
		}
		return
	}
	if s.retryAfter != "" {
		w.Header().Set("Retry-After", s.retryAfter)
	}
	w.WriteHeader(s.status)
	_, _ = io.WriteString(w, s.body)
}

// run sends the GETs through httpx to the scripted upstream and reports
// what each got.
func run(ctx context.Context, cfg Config, w io.Writer) (Report, error) {
	var rep Report
	up := &flaky{}
	srv := httptest.NewServer(up)
	defer srv.Close()

	// mu guards rep.Transitions, appended by the breaker's callback, and
	// lastCause, set by the fallback.
	var mu sync.Mutex
	var lastCause error
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	client, err := httpx.NewClient(&http.Client{Transport: otelsetup.HTTPTransport(base), Timeout: 30 * time.Second}, httpx.Options{
		MaxAttempts:    3,
		AttemptTimeout: cfg.AttemptTimeout,
		InitialBackoff: 10 * time.Millisecond,
		MaxRetryAfter:  5 * time.Second,
		Breaker: breaker.Settings{Failures: 3, OpenTimeout: time.Minute,
			OnStateChange: func(name string, from, to breaker.State) {
				mu.Lock()
				rep.Transitions = append(rep.Transitions, from.String()+"->"+to.String())
				mu.Unlock()
				fmt.Fprintf(w, "  breaker %s: %s -> %s\n", name, from, to)
			}},
		Fallback: func(req *http.Request, cause error) (*http.Response, error) {
			mu.Lock()
			lastCause = cause
			mu.Unlock()
			h := http.Header{"X-Fallback": {"true"}}
			return &http.Response{StatusCode: http.StatusOK, Header: h, Body: io.NopCloser(strings.NewReader("last known good"))}, nil
		},
	})
	if err != nil {
		return rep, err
	}
	for i := range calls {
		before := up.hits.Load()
		c, err := get(ctx, client, srv.URL)
		if err != nil {
			return rep, fmt.Errorf("call %d: %w", i+1, err)
		}
		c.Hits = up.hits.Load() - before
		if c.Fallback {
			mu.Lock()
			c.Cause = lastCause
			mu.Unlock()
		}
		rep.Calls = append(rep.Calls, c)
		fmt.Fprintf(w, "call %d: %d %q, upstream hits %d\n", i+1, c.Status, c.Body, c.Hits)
		if c.Fallback {
			fmt.Fprintf(w, "  served by the fallback, because: %v\n", c.Cause)
		}
	}
	rep.Hits = up.hits.Load()
	fmt.Fprintf(w, "upstream hits in all: %d\n", rep.Hits)
	return rep, nil
}

// get sends one GET and reads its answer.
func get(ctx context.Context, client *http.Client, url string) (Call, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Call{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return Call{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return Call{}, err
	}
	return Call{Status: resp.StatusCode, Body: string(body), Fallback: resp.Header.Get("X-Fallback") == "true"}, nil
}
