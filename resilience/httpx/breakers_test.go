package httpx_test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/resilience/httpx"
)

func TestTransport_breakerPerHost(t *testing.T) {
	sick := newUpstream(t, reply{status: 500, body: "down"})
	well := newUpstream(t, reply{status: 200, body: "up"})
	picky := newUpstream(t, reply{status: 404, body: "no such thing"})
	o := fast()
	o.MaxAttempts = 1
	o.Breaker = breaker.Settings{Failures: 2, OpenTimeout: time.Hour}
	c, ht, tr := newClient(t, o)

	for range 2 {
		if code, _ := get(t, c, sick.URL); code != 500 {
			t.Fatalf("status = %d, want 500", code)
		}
	}
	if s := ht.BreakerState(sick.host()); s != breaker.Open {
		t.Fatalf("sick host's breaker = %v after 2 failures, want open", s)
	}
	_, err := c.Get(sick.URL)
	if !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("err = %v, want breaker.ErrOpen", err)
	}
	if n := sick.hits.Load(); n != 2 {
		t.Errorf("sick host hits = %d, want 2: the open breaker sends nothing", n)
	}

	if code, body := get(t, c, well.URL); code != 200 || body != "up" {
		t.Errorf("well host: got %d %q, want 200 \"up\"", code, body)
	}
	for range 5 {
		if code, _ := get(t, c, picky.URL); code != 404 {
			t.Fatalf("status = %d, want 404", code)
		}
	}
	for _, h := range []string{well.host(), picky.host()} {
		if s := ht.BreakerState(h); s != breaker.Closed {
			t.Errorf("breaker of %s = %v, want closed: 2xx and 4xx are not failures", h, s)
		}
	}
	tr.checkClosed(t)
}

func TestTransport_breakerOpenStopsRetries(t *testing.T) {
	u := newUpstream(t, reply{status: 503})
	o := fast()
	o.MaxAttempts = 5
	o.Breaker = breaker.Settings{Failures: 2, OpenTimeout: time.Hour}
	c, _, tr := newClient(t, o)
	_, err := c.Get(u.URL)
	if !errors.Is(err, breaker.ErrOpen) {
		t.Errorf("err = %v, want breaker.ErrOpen", err)
	}
	if n := u.hits.Load(); n != 2 {
		t.Errorf("upstream hits = %d, want 2: the breaker sees every attempt", n)
	}
	tr.checkClosed(t)
}

// TestTransport_breakerCountsStatus: which answers count against the
// host's breaker. 429 does: a host that throttles is overloaded.
func TestTransport_breakerCountsStatus(t *testing.T) {
	tests := []struct {
		status int
		want   breaker.State // after two answers, with Failures: 2
	}{
		{http.StatusTooManyRequests, breaker.Open},
		{http.StatusServiceUnavailable, breaker.Open},
		{http.StatusInternalServerError, breaker.Open},
		{http.StatusNotFound, breaker.Closed},
		{http.StatusBadRequest, breaker.Closed},
		{http.StatusOK, breaker.Closed},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.status), func(t *testing.T) {
			u := newUpstream(t, reply{status: tt.status})
			o := fast()
			o.MaxAttempts = 1
			o.Breaker = breaker.Settings{Failures: 2, OpenTimeout: time.Hour}
			c, ht, tr := newClient(t, o)
			for range 2 {
				if code, _ := get(t, c, u.URL); code != tt.status {
					t.Fatalf("status = %d, want %d", code, tt.status)
				}
			}
			if s := ht.BreakerState(u.host()); s != tt.want {
				t.Errorf("breaker = %v after two %d answers, want %v", s, tt.status, tt.want)
			}
			tr.checkClosed(t)
		})
	}
}

func TestTransport_Breakers(t *testing.T) {
	sick := newUpstream(t, reply{status: 503})
	well := newUpstream(t, reply{status: 200})
	o := fast()
	o.MaxAttempts = 1
	o.Breaker = breaker.Settings{Failures: 1, OpenTimeout: time.Hour}
	c, err := httpx.NewClient(&http.Client{Transport: &http.Transport{}}, o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	if got := httpx.Breakers(c); len(got) != 0 {
		t.Errorf("Breakers before any request = %v, want none", got)
	}
	get(t, c, well.URL)
	before := httpx.Breakers(c)
	get(t, c, sick.URL)
	want := map[string]breaker.State{sick.host(): breaker.Open, well.host(): breaker.Closed}
	if got := httpx.Breakers(c); !maps.Equal(got, want) {
		t.Errorf("Breakers = %v, want %v", got, want)
	}
	if got := c.Transport.(*httpx.Transport).Breakers(); !maps.Equal(got, want) {
		t.Errorf("Transport.Breakers = %v, want %v", got, want)
	}
	if want := map[string]breaker.State{well.host(): breaker.Closed}; !maps.Equal(before, want) {
		t.Errorf("an earlier snapshot changed to %v, want %v", before, want)
	}
	for _, other := range []*http.Client{nil, {}, http.DefaultClient} {
		if got := httpx.Breakers(other); got != nil {
			t.Errorf("Breakers of a client without an httpx transport = %v, want nil", got)
		}
	}
}

// TestTransport_callerDeadlineDoesNotCount: an attempt cut short by the
// caller's own deadline says nothing about the host; an attempt that
// outlives AttemptTimeout does.
func TestTransport_callerDeadlineDoesNotCount(t *testing.T) {
	u := newUpstream(t, reply{status: 200, delay: time.Hour}) // answers when the request ends
	o := fast()
	o.MaxAttempts = 1
	o.AttemptTimeout = time.Hour
	o.Breaker = breaker.Settings{Failures: 1, OpenTimeout: time.Hour}
	c, ht, tr := newClient(t, o)
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u.URL, nil)
		resp, err := c.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			t.Fatal("a request past its caller's deadline succeeded")
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want the caller's context.DeadlineExceeded", err)
		}
	}
	if s := ht.BreakerState(u.host()); s != breaker.Closed {
		t.Fatalf("breaker = %v after two caller deadlines, want closed", s)
	}

	// The same wait, cut short by the attempt timeout: a failure.
	o.AttemptTimeout = 20 * time.Millisecond
	c2, ht2, tr2 := newClient(t, o)
	if _, err := c2.Get(u.URL); err == nil {
		t.Fatal("an attempt past AttemptTimeout succeeded")
	}
	if s := ht2.BreakerState(u.host()); s != breaker.Open {
		t.Fatalf("breaker = %v after an attempt timeout, want open", s)
	}
	tr.checkClosed(t)
	tr2.checkClosed(t)
}
