package httpx_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestTransport_retryAfterSpacesAttempts: a loopback upstream answers 503
// with Retry-After: 1, then 200. The second attempt reaches it at least a
// second later on the transport's clock, which waited exactly that second.
func TestTransport_retryAfterSpacesAttempts(t *testing.T) {
	var clock *fakeClock
	var mu sync.Mutex
	var hits []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits = append(hits, clock.Now())
		n := len(hits)
		mu.Unlock()
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	c, ht, tr := newClient(t, fast())
	clock = useFakeClock(ht, time.Now())
	if code, body := get(t, c, srv.URL); code != 200 || body != "ok" {
		t.Fatalf("got %d %q, want 200 \"ok\"", code, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hits) != 2 {
		t.Fatalf("upstream hits = %d, want 2", len(hits))
	}
	if gap := hits[1].Sub(hits[0]); gap < time.Second {
		t.Errorf("second attempt came %v after the first, want at least the Retry-After's 1s", gap)
	}
	if waits, want := clock.Waits(), []time.Duration{time.Second}; !slices.Equal(waits, want) {
		t.Errorf("waits = %v, want %v", waits, want)
	}
	tr.checkClosed(t)
}

// TestTransport_retryAfterPastDeadline: a Retry-After that would end after
// the request's deadline is not waited out: the 503 comes back at once.
func TestTransport_retryAfterPastDeadline(t *testing.T) {
	u := newUpstream(t, reply{status: 503, retryAfter: "60", body: "busy"}, reply{status: 200, body: "ok"})
	o := fast()
	o.MaxRetryAfter = time.Hour
	o.MaxElapsed = time.Hour
	c, ht, tr := newClient(t, o)
	clock := useFakeClock(ht, time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("err = %v, want the 503 itself", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || u.hits.Load() != 1 || len(clock.Waits()) != 0 {
		t.Errorf("status %d after %d hits and waits %v; want the first 503, without waiting", resp.StatusCode, u.hits.Load(), clock.Waits())
	}
	if ctx.Err() != nil {
		t.Error("the request ended after its deadline")
	}
	tr.checkClosed(t)
}
