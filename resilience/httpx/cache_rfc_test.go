package httpx_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herdguard/herdguard/resilience/httpx"
)

// hostEcho is an upstream that answers each request with the Host it was
// sent for and the given response headers.
func hostEcho(t *testing.T, header http.Header) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		for k, v := range header {
			w.Header()[k] = v
		}
		fmt.Fprint(w, "host "+r.Host)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// getHost sends a GET to url with Request.Host host ("": the URL's) and
// headers h, and returns the body.
func getHost(t *testing.T, c *http.Client, url, host string, h http.Header) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTransport_cacheKeysByTargetURI: RFC 9111 section 4 reuses a stored
// response only for a request with the same target URI, whose authority
// for a client request is Request.Host when set (RFC 9110 section 7.2),
// else the URL's host. Requests to one address under two Hosts are two
// resources.
func TestTransport_cacheKeysByTargetURI(t *testing.T) {
	srv, hits := hostEcho(t, http.Header{"Cache-Control": {"max-age=60"}})
	c, _, tr := newClient(t, cached())
	urlHost := srv.Listener.Addr().String()
	steps := []struct {
		host string // Request.Host
		want string // the body: the Host the upstream saw
		hits int32  // upstream hits after the request
	}{
		{"foo", "host foo", 1},
		{"foofoo", "host foofoo", 2}, // not foo's response
		{"foo", "host foo", 2},
		{"foofoo", "host foofoo", 2},
		{"", "host " + urlHost, 3}, // the URL's own host is a third resource
		{urlHost, "host " + urlHost, 3},
	}
	for i, s := range steps {
		if body := getHost(t, c, srv.URL, s.host, nil); body != s.want {
			t.Errorf("request %d (Host %q): body %q, want %q", i+1, s.host, body, s.want)
		}
		if n := hits.Load(); n != s.hits {
			t.Errorf("request %d (Host %q): upstream hits = %d, want %d", i+1, s.host, n, s.hits)
		}
	}
	tr.checkClosed(t)
}

func TestDefaultCacheKey_targetURI(t *testing.T) {
	req, _ := http.NewRequest(http.MethodGet, "http://10.0.0.1:8080/p?q=1", nil)
	plain, _ := httpx.DefaultCacheKey(req)
	req.Host = "api.example.com"
	named, _ := httpx.DefaultCacheKey(req)
	if plain != "GET http://10.0.0.1:8080/p?q=1" {
		t.Errorf("key without Host = %q", plain)
	}
	if named != "GET http://api.example.com/p?q=1" {
		t.Errorf("key with Host api.example.com = %q, want the target URI's", named)
	}
}

// TestTransport_cacheAuthorization: with CacheCredentials, a response to a
// request with Authorization is kept only if it says a shared cache may
// keep it: public, s-maxage or must-revalidate (RFC 9111 section 3.5).
// max-age alone does not. The rule is about Authorization, not Cookie.
func TestTransport_cacheAuthorization(t *testing.T) {
	bearer := http.Header{"Authorization": {"Bearer alice"}}
	cookie := http.Header{"Cookie": {"user=alice"}}
	tests := []struct {
		name    string
		request http.Header
		cc      string // the response's Cache-Control
		hits    int32  // for two identical requests
	}{
		{"no directives", bearer, "", 2},
		{"max-age alone", bearer, "max-age=60", 2},
		{"public", bearer, "public", 1},
		{"public with max-age", bearer, "public, max-age=60", 1},
		{"s-maxage", bearer, "s-maxage=60", 1},
		{"must-revalidate with max-age", bearer, "max-age=60, must-revalidate", 1},
		{"must-revalidate alone", bearer, "must-revalidate", 1},
		{"private wins over public", bearer, "public, private", 2},
		{"Cookie with max-age", cookie, "max-age=60", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var header http.Header
			if tt.cc != "" {
				header = http.Header{"Cache-Control": {tt.cc}}
			}
			u := newUpstream(t, reply{status: 200, body: "b", header: header})
			o := cached()
			o.CacheCredentials = true
			c, _, tr := newClient(t, o)
			for range 2 {
				if code, body, _ := do(t, c, http.MethodGet, u.URL, tt.request); code != 200 || body != "b" {
					t.Fatalf("got %d %q, want 200 \"b\"", code, body)
				}
			}
			if n := u.hits.Load(); n != tt.hits {
				t.Errorf("upstream hits = %d, want %d", n, tt.hits)
			}
			tr.checkClosed(t)
		})
	}
}

// TestTransport_cacheStatuses: RFC 9110 section 15.1 and RFC 9111 section
// 4.2.2 make 200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414 and 501
// heuristically cacheable: the cache keeps them without an explicit
// lifetime (for CacheTTL), and with one. 206 is never kept: the cache does
// not handle ranges. 302, 303, 307 and other 2xx are kept only with an
// explicit lifetime (RFC 9111 section 3); the other 4xx and 5xx never.
func TestTransport_cacheStatuses(t *testing.T) {
	type row struct {
		status   int
		cc       string // the response's Cache-Control
		kept     bool
		withBody bool
	}
	var tests []row
	for _, code := range []int{200, 203, 300, 301, 308, 404, 405, 410, 414, 501} {
		tests = append(tests, row{code, "", true, true}, row{code, "max-age=60", true, true})
	}
	tests = append(tests,
		row{204, "", true, false}, row{204, "max-age=60", true, false},
		row{206, "", false, true}, row{206, "max-age=60", false, true},
		row{201, "", false, true}, row{201, "max-age=60", true, true},
		row{302, "", false, true}, row{302, "max-age=60", true, true},
		row{303, "", false, true}, row{303, "max-age=60", true, true},
		row{307, "", false, true}, row{307, "max-age=60", true, true},
		row{400, "max-age=60", false, true}, row{403, "max-age=60", false, true},
		row{500, "max-age=60", false, true}, row{503, "max-age=60", false, true},
		row{404, "no-store", false, true}, row{301, "max-age=0", false, true},
	)
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d %s", tt.status, tt.cc), func(t *testing.T) {
			header := http.Header{"Location": {"/elsewhere"}}
			if tt.cc != "" {
				header.Set("Cache-Control", tt.cc)
			}
			body := ""
			if tt.withBody {
				body = "b"
			}
			u := newUpstream(t, reply{status: tt.status, body: body, header: header})
			o := cached()
			o.MaxAttempts = 1 // one hit per exchange, 5xx included
			c, _, tr := newClient(t, o)
			c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			for range 2 {
				if code, b, _ := do(t, c, http.MethodGet, u.URL, nil); code != tt.status || b != body {
					t.Fatalf("got %d %q, want %d %q", code, b, tt.status, body)
				}
			}
			want := int32(2)
			if tt.kept {
				want = 1
			}
			if n := u.hits.Load(); n != want {
				t.Errorf("upstream hits = %d, want %d (kept: %v)", n, want, tt.kept)
			}
			tr.checkClosed(t)
		})
	}
}

// TestTransport_cacheKept501GoesToFallback: a 501 is heuristically
// cacheable (RFC 9111 section 4.2.2) and a failing status: kept, it still
// goes to Fallback on every request, as a 501 does without the cache.
func TestTransport_cacheKept501GoesToFallback(t *testing.T) {
	u := newUpstream(t, reply{status: 501, body: "not here"})
	o := cached()
	o.MaxAttempts = 1
	var causes atomic.Int32
	o.Fallback = func(req *http.Request, cause error) (*http.Response, error) {
		causes.Add(1)
		return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
	}
	c, _, _ := newClient(t, o)
	for i := range 3 {
		if code, _ := get(t, c, u.URL); code != 200 {
			t.Errorf("request %d: status %d, want the fallback's 200", i+1, code)
		}
	}
	if n := u.hits.Load(); n != 1 {
		t.Errorf("upstream hits = %d, want 1 (the 501 is kept)", n)
	}
	if n := causes.Load(); n != 3 {
		t.Errorf("Fallback calls = %d, want 3", n)
	}
}

// TestTransport_cacheRequestFreshness: a request's max-age (RFC 9111
// section 5.2.1.1) refuses a stored response older than it, and its
// min-fresh (section 5.2.1.3) one that stays fresh for less than it: the
// request goes to the upstream, whose response is kept in place of the old
// one. The transport's clock is a fake the test moves.
func TestTransport_cacheRequestFreshness(t *testing.T) {
	type step struct {
		after time.Duration // clock move before the request
		cc    string        // the request's Cache-Control
		hits  int32         // upstream hits after it
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"max-age, RFC 9111 section 5.2.1.1", []step{
			{0, "", 1},
			{7 * time.Second, "max-age=10", 1}, // age 10 s (Age 3 + 7 s): accepted
			{time.Second, "max-age=10", 2},     // age 11 s: refused, loaded again
			{5 * time.Second, "max-age=10", 2}, // the new one is 8 s old
			{0, "", 2},
		}},
		{"max-age counts the upstream's Age", []step{
			{0, "", 1},
			{0, "max-age=5", 1},               // age 3 s, the upstream's Age
			{3 * time.Second, "max-age=5", 2}, // age 6 s
		}},
		{"min-fresh, RFC 9111 section 5.2.1.3", []step{
			{0, "", 1},
			{20 * time.Second, "min-fresh=30", 1}, // fresh 37 s more: accepted
			{10 * time.Second, "min-fresh=30", 2}, // 27 s: refused, loaded again
			{0, "min-fresh=30", 2},                // the new one: 57 s
			{0, "min-fresh=100", 3},               // more than any response's life
		}},
		{"invalid min-fresh bypasses the cache", []step{
			{0, "", 1},
			{0, "min-fresh=soon", 2},
			{0, "", 2},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t, reply{status: 200, body: "b", header: http.Header{"Cache-Control": {"max-age=60"}, "Age": {"3"}}})
			c, ht, tr := newClient(t, cached())
			clock := useFakeClock(ht, time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
			for i, s := range tt.steps {
				clock.Advance(s.after)
				var h http.Header
				if s.cc != "" {
					h = http.Header{"Cache-Control": {s.cc}}
				}
				if code, body, _ := do(t, c, http.MethodGet, u.URL, h); code != 200 || body != "b" {
					t.Fatalf("request %d: got %d %q, want 200 \"b\"", i+1, code, body)
				}
				if n := u.hits.Load(); n != s.hits {
					t.Fatalf("request %d (%q): upstream hits = %d, want %d", i+1, s.cc, n, s.hits)
				}
			}
			tr.checkClosed(t)
		})
	}
}

// TestTransport_cacheVaryNewField: the first response that names a
// request header in Vary is kept under its variant key, the one that
// covers that header (RFC 9111 section 4.1): the next request with the
// same value is answered from the cache, one with another value is not.
func TestTransport_cacheVaryNewField(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Vary", "Accept-Language")
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprint(w, answerFor(r.Header, "Accept-Language"))
	}))
	t.Cleanup(srv.Close)
	c, _, _ := newClient(t, cached())
	lang := func(v string) http.Header { return http.Header{"Accept-Language": {v}} }
	steps := []struct {
		header http.Header
		hits   int32
	}{
		{lang("en"), 1},
		{lang("en"), 1}, // kept under the variant key of "en"
		{lang("fr"), 2},
		{lang("fr"), 2},
		{nil, 3},
		{lang("en"), 3},
	}
	for i, s := range steps {
		_, body, _ := do(t, c, http.MethodGet, srv.URL, s.header)
		if want := answerFor(s.header, "Accept-Language"); body != want {
			t.Errorf("request %d (%v): body %q, want %q", i+1, s.header, body, want)
		}
		if n := hits.Load(); n != s.hits {
			t.Errorf("request %d (%v): upstream hits = %d, want %d", i+1, s.header, n, s.hits)
		}
	}
}
