package httpx_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/resilience/httpx"
)

// The retry tests below share their shape (upstream script, client, one
// request, hits): each is one scenario, kept whole so that a failure names it.
func TestTransport_retries503ThenSucceeds(t *testing.T) {
	u := newUpstream(t,
		reply{status: 503, body: "busy"},
		reply{status: 503, body: "still busy"},
		reply{status: 200, body: "ok"})
	c, _, tr := newClient(t, fast())
	code, body := get(t, c, u.URL)
	if code != 200 || body != "ok" {
		t.Errorf("got %d %q, want 200 \"ok\"", code, body)
	}
	if n := u.hits.Load(); n != 3 {
		t.Errorf("upstream hits = %d, want 3", n)
	}
	tr.checkClosed(t)
}

func TestTransport_givesUpAfterMaxAttempts(t *testing.T) {
	u := newUpstream(t, reply{status: 502, body: "bad gateway"})
	o := fast()
	o.MaxAttempts = 4
	c, _, tr := newClient(t, o)
	code, body := get(t, c, u.URL)
	if code != 502 || body != "bad gateway" {
		t.Errorf("got %d %q, want the last 502 with its body", code, body)
	}
	if n := u.hits.Load(); n != 4 {
		t.Errorf("upstream hits = %d, want 4", n)
	}
	tr.checkClosed(t)
}

func TestTransport_retryAfter(t *testing.T) {
	// The transport's clock is a fake that starts on a whole second, so
	// that an HTTP-date (whole seconds) names an exact wait.
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name       string
		status     int
		retryAfter string
		hits       int32
		waits      []time.Duration // the waits between attempts
	}{
		{"429 seconds", 429, "1", 2, []time.Duration{time.Second}},
		{"503 seconds", 503, "3", 2, []time.Duration{3 * time.Second}},
		{"429 HTTP-date", 429, start.Add(2 * time.Second).Format(http.TimeFormat), 2, []time.Duration{2 * time.Second}},
		{"HTTP-date in the past", 503, start.Add(-time.Hour).Format(http.TimeFormat), 2, nil},
		{"429 longer than MaxRetryAfter", 429, "3600", 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t, reply{status: tt.status, retryAfter: tt.retryAfter}, reply{status: 200, body: "ok"})
			o := fast()
			o.MaxRetryAfter = 5 * time.Second
			c, ht, tr := newClient(t, o)
			clock := useFakeClock(ht, start)
			code, _ := get(t, c, u.URL)
			if n := u.hits.Load(); n != tt.hits {
				t.Fatalf("upstream hits = %d, want %d", n, tt.hits)
			}
			tr.checkClosed(t)
			waits := clock.Waits()
			if tt.hits == 1 {
				if code != tt.status || len(waits) != 0 {
					t.Errorf("status = %d after waits %v, want the upstream's %d returned as is, at once", code, waits, tt.status)
				}
				return
			}
			if code != 200 {
				t.Errorf("status = %d, want 200", code)
			}
			if tt.waits == nil { // only the backoff: the Retry-After has passed
				if len(waits) != 1 || waits[0] > o.MaxBackoff*3/2 {
					t.Errorf("waits = %v, want one backoff of at most %v", waits, o.MaxBackoff*3/2)
				}
				return
			}
			if !slices.Equal(waits, tt.waits) {
				t.Errorf("waits = %v, want %v: the Retry-After, which is longer than the backoff", waits, tt.waits)
			}
		})
	}
}

func TestTransport_maxElapsed(t *testing.T) {
	// Each 503 asks for 2 seconds. Starting at 0s, 2s and 4s, the
	// attempts end when a fourth one would start at 6s, past MaxElapsed.
	u := newUpstream(t, reply{status: 503, retryAfter: "2"})
	o := fast()
	o.MaxAttempts = 10
	o.MaxElapsed = 5 * time.Second
	o.Breaker = breaker.Settings{Failures: 100}
	c, ht, tr := newClient(t, o)
	clock := useFakeClock(ht, time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	if code, _ := get(t, c, u.URL); code != 503 {
		t.Errorf("status = %d, want the last 503", code)
	}
	if n := u.hits.Load(); n != 3 {
		t.Errorf("upstream hits = %d, want 3", n)
	}
	if waits, want := clock.Waits(), []time.Duration{2 * time.Second, 2 * time.Second}; !slices.Equal(waits, want) {
		t.Errorf("waits = %v, want %v", waits, want)
	}
	tr.checkClosed(t)
}

func TestTransport_retriesByMethod(t *testing.T) {
	tests := []struct {
		method string
		header string // an extra header name, if any
		body   func() io.Reader
		hits   int32
	}{
		{http.MethodGet, "", nil, 3},
		{http.MethodHead, "", nil, 3},
		{http.MethodDelete, "", nil, 3},
		{http.MethodPut, "", func() io.Reader { return strings.NewReader("x") }, 3},
		{http.MethodPost, "", func() io.Reader { return strings.NewReader("x") }, 1},
		{http.MethodPatch, "", func() io.Reader { return strings.NewReader("x") }, 1},
		{http.MethodPost, "Idempotency-Key", func() io.Reader { return strings.NewReader("x") }, 3},
		// A body with no GetBody cannot be replayed: sent once.
		{http.MethodPut, "", func() io.Reader { return io.MultiReader(strings.NewReader("x")) }, 1},
	}
	for _, tt := range tests {
		name := tt.method
		if tt.header != "" {
			name += " with " + tt.header
		}
		if tt.body != nil && tt.hits == 1 && tt.method == http.MethodPut {
			name += " without GetBody"
		}
		t.Run(name, func(t *testing.T) {
			u := newUpstream(t, reply{status: 503})
			c, _, tr := newClient(t, fast())
			var body io.Reader
			if tt.body != nil {
				body = tt.body()
			}
			req, err := http.NewRequest(tt.method, u.URL, body)
			if err != nil {
				t.Fatal(err)
			}
			if tt.header != "" {
				req.Header.Set(tt.header, "k-1")
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 503 {
				t.Errorf("status = %d, want 503", resp.StatusCode)
			}
			if n := u.hits.Load(); n != tt.hits {
				t.Errorf("upstream hits = %d, want %d", n, tt.hits)
			}
			tr.checkClosed(t)
		})
	}
}

func TestTransport_putBodyReplayed(t *testing.T) {
	u := newUpstream(t, reply{status: 503}, reply{status: 500}, reply{status: 204})
	c, _, tr := newClient(t, fast())
	if code, _ := send(t, c, http.MethodPut, u.URL, strings.NewReader("payload")); code != 204 {
		t.Fatalf("status = %d, want 204", code)
	}
	got := u.requestBodies()
	if len(got) != 3 {
		t.Fatalf("upstream saw %d requests, want 3", len(got))
	}
	for i, b := range got {
		if b != "payload" {
			t.Errorf("attempt %d sent body %q, want \"payload\"", i+1, b)
		}
	}
	tr.checkClosed(t)
}

func TestTransport_attemptTimeout(t *testing.T) {
	u := newUpstream(t, reply{status: 200, delay: time.Minute})
	o := fast()
	o.MaxAttempts = 2
	o.AttemptTimeout = 50 * time.Millisecond
	c, ht, tr := newClient(t, o)
	_, err := c.Get(u.URL)
	if !errors.Is(err, httpx.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want httpx.ErrTimeout and context.DeadlineExceeded", err)
	}
	var ne interface{ Timeout() bool }
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("err = %v does not report Timeout()", err)
	}
	// Counted where the transport sends them: an attempt may time out
	// before it reaches the upstream.
	if n := tr.attempts.Load(); n != 2 {
		t.Errorf("attempts = %d, want 2", n)
	}
	if s := ht.BreakerState(u.host()); s != breaker.Closed {
		t.Errorf("breaker = %v, want closed after 2 of 5 failures", s)
	}
}

func TestTransport_callerCancelDuringBackoff(t *testing.T) {
	u := newUpstream(t, reply{status: 503, retryAfter: "60"})
	o := fast()
	o.MaxRetryAfter = time.Hour
	o.MaxElapsed = time.Hour
	o.Breaker = breaker.Settings{Failures: 1, OpenTimeout: time.Hour}
	c, ht, tr := newClient(t, o)
	// The transport reports each wait between attempts, then waits for
	// real: the test cancels once the transport has counted the 503 and
	// is waiting out its Retry-After.
	waiting := make(chan time.Duration, 1)
	httpx.SetClock(ht, time.Now, func(ctx context.Context, d time.Duration) error {
		waiting <- d
		return httpx.Sleep(ctx, d)
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u.URL, nil)
	errc := make(chan error, 1)
	go func() {
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	select {
	case d := <-waiting:
		if d != time.Minute {
			t.Errorf("waiting %v, want the Retry-After's minute", d)
		}
	case err := <-errc:
		t.Fatalf("request ended without waiting to retry: %v", err)
	}
	if s := ht.BreakerState(u.host()); s != breaker.Open {
		t.Errorf("breaker = %v, want open: the 503 counted before the caller left", s)
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("request still waiting out Retry-After after its context was canceled")
	}
	if n := u.hits.Load(); n != 1 {
		t.Errorf("upstream hits = %d, want 1", n)
	}
	tr.checkClosed(t)
}

func TestTransport_fallback(t *testing.T) {
	tests := []struct {
		name      string
		script    []reply
		breaker   breaker.Settings
		calls     int // requests sent
		hits      int32
		wantCause func(error) bool
	}{
		{"after the last attempt failed", []reply{{status: 503}}, breaker.Settings{}, 1, 3,
			func(err error) bool {
				var se *httpx.StatusError
				return errors.As(err, &se) && se.StatusCode == 503
			}},
		{"when the breaker is open", []reply{{status: 500}}, breaker.Settings{Failures: 3, OpenTimeout: time.Hour}, 2, 3,
			func(err error) bool { return errors.Is(err, breaker.ErrOpen) }},
		{"not on success", []reply{{status: 200, body: "real"}}, breaker.Settings{}, 1, 1, nil},
		{"not on 404", []reply{{status: 404, body: "real"}}, breaker.Settings{}, 1, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t, tt.script...)
			var causes []error
			o := fast()
			o.Breaker = tt.breaker
			o.Fallback = func(req *http.Request, cause error) (*http.Response, error) {
				causes = append(causes, cause) // requests are sequential
				return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("fallback"))}, nil
			}
			c, _, tr := newClient(t, o)
			var body string
			for range tt.calls {
				_, body = get(t, c, u.URL)
			}
			if n := u.hits.Load(); n != tt.hits {
				t.Errorf("upstream hits = %d, want %d", n, tt.hits)
			}
			tr.checkClosed(t)
			if tt.wantCause == nil {
				if len(causes) != 0 || body != "real" {
					t.Errorf("fallback called for %v, body %q; want the upstream's body", causes, body)
				}
				return
			}
			if body != "fallback" {
				t.Errorf("body = %q, want the fallback's", body)
			}
			if last := causes[len(causes)-1]; !tt.wantCause(last) {
				t.Errorf("fallback cause = %v, not what the case expects", last)
			}
		})
	}
}

func TestTransport_fallbackError(t *testing.T) {
	u := newUpstream(t, reply{status: 503})
	errOwn := errors.New("no fallback today")
	o := fast()
	o.MaxAttempts = 1
	o.Fallback = func(*http.Request, error) (*http.Response, error) { return nil, errOwn }
	c, _, _ := newClient(t, o)
	_, err := c.Get(u.URL)
	var se *httpx.StatusError
	if !errors.Is(err, httpx.ErrFallback) || !errors.Is(err, errOwn) || !errors.As(err, &se) {
		t.Errorf("err = %v, want it to match ErrFallback, the fallback's error and the 503", err)
	}
}

func TestNew_badOptions(t *testing.T) {
	tests := []struct {
		name string
		o    httpx.Options
		want string
	}{
		{"negative attempts", httpx.Options{MaxAttempts: -1}, "MaxAttempts"},
		{"negative attempt timeout", httpx.Options{AttemptTimeout: -time.Second}, "AttemptTimeout"},
		{"negative max elapsed", httpx.Options{MaxElapsed: -time.Second}, "MaxElapsed"},
		{"negative retry-after cap", httpx.Options{MaxRetryAfter: -time.Second}, "MaxRetryAfter"},
		{"negative cache ttl", httpx.Options{CacheTTL: -time.Second}, "CacheTTL"},
		{"negative cache body", httpx.Options{CacheMaxBody: -1}, "CacheMaxBody"},
		{"backoff cap below start", httpx.Options{InitialBackoff: time.Second, MaxBackoff: time.Millisecond}, "MaxBackoff"},
		{"cache key without ttl", httpx.Options{CacheKey: httpx.DefaultCacheKey}, "CacheTTL"},
		{"cache credentials without ttl", httpx.Options{CacheCredentials: true}, "CacheCredentials"},
		{"bad breaker", httpx.Options{Breaker: breaker.Settings{OpenTimeout: -1}}, "Breaker"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := httpx.New(nil, tt.o)
			if !errors.Is(err, httpx.ErrInvalidOptions) {
				t.Fatalf("err = %v, want ErrInvalidOptions", err)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "httpx: ") || !strings.Contains(msg, tt.want) {
				t.Errorf("err = %q, want it prefixed \"httpx: \" and naming %s", msg, tt.want)
			}
			if _, err := httpx.NewClient(nil, tt.o); !errors.Is(err, httpx.ErrInvalidOptions) {
				t.Errorf("NewClient err = %v, want ErrInvalidOptions", err)
			}
		})
	}
}

func TestNewClient_keepsClientSettings(t *testing.T) {
	orig := &http.Client{Timeout: 7 * time.Second}
	c, err := httpx.NewClient(orig, httpx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c == orig || c.Timeout != orig.Timeout || orig.Transport != nil {
		t.Errorf("NewClient must return a copy with the same Timeout and leave the original alone")
	}
	if _, ok := c.Transport.(*httpx.Transport); !ok {
		t.Errorf("Transport = %T, want *httpx.Transport", c.Transport)
	}
}

func TestIsIdempotent(t *testing.T) {
	tests := []struct {
		method string
		header string
		want   bool
	}{
		{"", "", true}, {"GET", "", true}, {"HEAD", "", true}, {"OPTIONS", "", true}, {"TRACE", "", true},
		{"PUT", "", true}, {"DELETE", "", true}, {"POST", "", false}, {"PATCH", "", false}, {"CONNECT", "", false},
		{"POST", "Idempotency-Key", true}, {"PATCH", "X-Idempotency-Key", true},
	}
	for _, tt := range tests {
		req := &http.Request{Method: tt.method, Header: http.Header{}}
		if tt.header != "" {
			req.Header.Set(tt.header, "k")
		}
		if got := httpx.IsIdempotent(req); got != tt.want {
			t.Errorf("IsIdempotent(%q, %q) = %v, want %v", tt.method, tt.header, got, tt.want)
		}
	}
}
