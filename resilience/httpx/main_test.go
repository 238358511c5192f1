package httpx_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/herdguard/herdguard/internal/retryloop/retrytest"
	"github.com/herdguard/herdguard/resilience/httpx"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// reply is one scripted answer of an [upstream].
type reply struct {
	status     int
	retryAfter string
	body       string
	header     http.Header   // more response headers
	delay      time.Duration // waits this long (or until the request ends) first
}

// upstream is a real HTTP server on 127.0.0.1 that answers its n-th hit
// (from 0) with script[n], or the script's last reply past its end. It
// records each hit's request body.
type upstream struct {
	*httptest.Server
	script []reply
	hits   atomic.Int32

	mu     sync.Mutex // guards bodies
	bodies []string
}

func newUpstream(t *testing.T, script ...reply) *upstream {
	t.Helper()
	u := &upstream{script: script}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	n := int(u.hits.Add(1)) - 1
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.bodies = append(u.bodies, string(body))
	u.mu.Unlock()
	rp := u.script[min(n, len(u.script)-1)]
	if rp.delay > 0 {
		select {
		case <-time.After(rp.delay):
		case <-r.Context().Done():
			return
		}
	}
	if rp.retryAfter != "" {
		w.Header().Set("Retry-After", rp.retryAfter)
	}
	for k, v := range rp.header {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(rp.body)))
	w.WriteHeader(rp.status)
	_, _ = io.WriteString(w, rp.body)
}

func (u *upstream) host() string { return u.Listener.Addr().String() }

func (u *upstream) requestBodies() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.bodies...)
}

// bodyTracker is the transport under test's own transport: it counts the
// attempts sent through it and records every response body the upstream
// hands out, whether it was read to its end and whether it was closed.
type bodyTracker struct {
	next     http.RoundTripper
	attempts atomic.Int32

	mu     sync.Mutex // guards bodies
	bodies []*trackedBody
}

type trackedBody struct {
	io.ReadCloser
	eof, closed atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

func (b *trackedBody) Close() error {
	b.closed.Store(true)
	return b.ReadCloser.Close()
}

func (tr *bodyTracker) RoundTrip(req *http.Request) (*http.Response, error) {
	tr.attempts.Add(1)
	resp, err := tr.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	tb := &trackedBody{ReadCloser: resp.Body}
	resp.Body = tb
	tr.mu.Lock()
	tr.bodies = append(tr.bodies, tb)
	tr.mu.Unlock()
	return resp, nil
}

// checkClosed fails t unless every body was closed, and every body but the
// last (those the transport under test discarded) was drained first.
func (tr *bodyTracker) checkClosed(t *testing.T) {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for i, b := range tr.bodies {
		if !b.closed.Load() {
			t.Errorf("response body %d of %d was not closed", i+1, len(tr.bodies))
		}
		if i < len(tr.bodies)-1 && !b.eof.Load() {
			t.Errorf("discarded response body %d of %d was closed before it was drained", i+1, len(tr.bodies))
		}
	}
}

// newClient returns a client whose transport is httpx over a body tracker
// over a fresh http.Transport, whose idle connections the test closes.
func newClient(t *testing.T, o httpx.Options) (*http.Client, *httpx.Transport, *bodyTracker) {
	t.Helper()
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	tr := &bodyTracker{next: base}
	ht, err := httpx.New(tr, o)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: ht}, ht, tr
}

// fakeClock is a transport clock the test controls (see
// [httpx.SetClock]): it stands still except in the waits between attempts,
// which return at once and move it forward by what they were asked to
// wait. It records those waits.
type fakeClock = retrytest.Clock

// useFakeClock gives ht a fake clock that starts at start.
func useFakeClock(ht *httpx.Transport, start time.Time) *fakeClock {
	c := retrytest.New(start)
	httpx.SetClock(ht, c.Now, c.Sleep)
	return c
}

// fast are options whose backoff waits are short enough for tests.
func fast() httpx.Options {
	return httpx.Options{InitialBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}
}

// get sends a GET to url and returns the status and the whole body.
func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	return send(t, c, http.MethodGet, url, nil)
}

func send(t *testing.T, c *http.Client, method, url string, body io.Reader) (int, string) {
	t.Helper()
	code, b, _ := exchange(t, c, method, url, body, nil)
	return code, b
}

// exchange sends a request with body and headers h and returns the
// status, the whole body and the response headers.
func exchange(t *testing.T, c *http.Client, method, url string, body io.Reader, h http.Header) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body of %s %s: %v", method, url, err)
	}
	return resp.StatusCode, string(b), resp.Header
}
