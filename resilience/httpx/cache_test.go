package httpx_test

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herdguard/herdguard/resilience/httpx"
)

// do sends a request with the given headers and returns the status, the
// whole body and the response headers.
func do(t *testing.T, c *http.Client, method, url string, h http.Header) (int, string, http.Header) {
	t.Helper()
	return exchange(t, c, method, url, nil, h)
}

// cached are options with the cache on for a minute.
func cached() httpx.Options {
	o := fast()
	o.CacheTTL = time.Minute
	return o
}

func TestTransport_cacheServesGet(t *testing.T) {
	const body = "the same answer for everyone"
	u := newUpstream(t, reply{status: 200, body: body, delay: 50 * time.Millisecond})
	c, _, tr := newClient(t, cached())
	const callers = 20
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			resp, err := c.Get(u.URL)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil || string(b) != body || resp.StatusCode != 200 {
				t.Errorf("got %d %q (%v), want 200 %q", resp.StatusCode, b, err, body)
			}
		})
	}
	wg.Wait()
	// And sequentially, from the cache.
	for range 3 {
		if code, b := get(t, c, u.URL); code != 200 || b != body {
			t.Errorf("cached GET = %d %q, want 200 %q", code, b, body)
		}
	}
	if n := u.hits.Load(); n != 1 {
		t.Errorf("upstream hits = %d for %d GETs, want 1", n, callers+3)
	}
	tr.checkClosed(t)
}

// TestTransport_cacheRequestRules: which requests may use the cache.
func TestTransport_cacheRequestRules(t *testing.T) {
	tests := []struct {
		name   string
		method string
		header http.Header
		creds  bool  // Options.CacheCredentials
		hits   int32 // for two identical requests
	}{
		{"GET is cached", http.MethodGet, nil, false, 1},
		{"HEAD is cached", http.MethodHead, nil, false, 1},
		{"POST is not", http.MethodPost, nil, false, 2},
		{"Range is not", http.MethodGet, http.Header{"Range": {"bytes=0-0"}}, false, 2},
		{"Authorization is not", http.MethodGet, http.Header{"Authorization": {"Bearer t"}}, false, 2},
		{"Cookie is not", http.MethodGet, http.Header{"Cookie": {"user=alice"}}, false, 2},
		{"empty Cookie is not", http.MethodGet, http.Header{"Cookie": {""}}, false, 2},
		// The response has no public, s-maxage or must-revalidate: RFC
		// 9111 section 3.5 lets the request through but keeps the
		// response out (see TestTransport_cacheAuthorization).
		{"Authorization with CacheCredentials is, its response is not", http.MethodGet, http.Header{"Authorization": {"Bearer t"}}, true, 2},
		{"Cookie with CacheCredentials is", http.MethodGet, http.Header{"Cookie": {"user=alice"}}, true, 1},
		{"Cache-Control no-store is not", http.MethodGet, http.Header{"Cache-Control": {"no-store"}}, false, 2},
		{"Cache-Control no-cache is not", http.MethodGet, http.Header{"Cache-Control": {"no-cache"}}, false, 2},
		{"Cache-Control max-age=0 is not", http.MethodGet, http.Header{"Cache-Control": {"max-age=0"}}, false, 2},
		{"Cache-Control max-age=60 is", http.MethodGet, http.Header{"Cache-Control": {"max-age=60"}}, false, 1},
		{"Pragma no-cache is not", http.MethodGet, http.Header{"Pragma": {"no-cache"}}, false, 2},
		{"Pragma with Cache-Control is", http.MethodGet, http.Header{"Pragma": {"no-cache"}, "Cache-Control": {"max-age=60"}}, false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t, reply{status: 200, body: "b"})
			o := cached()
			o.CacheCredentials = tt.creds
			c, _, tr := newClient(t, o)
			for range 2 {
				if code, _, _ := do(t, c, tt.method, u.URL, tt.header); code != 200 {
					t.Fatalf("status = %d, want 200", code)
				}
			}
			if n := u.hits.Load(); n != tt.hits {
				t.Errorf("upstream hits = %d, want %d", n, tt.hits)
			}
			tr.checkClosed(t)
		})
	}
}

// TestTransport_cacheResponseRules: which responses the cache keeps.
func TestTransport_cacheResponseRules(t *testing.T) {
	const date = "Wed, 02 Jan 2030 03:04:05 GMT"
	cc := func(v string) http.Header { return http.Header{"Cache-Control": {v}} }
	tests := []struct {
		name   string
		status int
		header http.Header
		hits   int32 // for two identical requests
	}{
		{"200 without directives is kept", 200, nil, 1},
		{"404 is, heuristically", 404, nil, 1},
		{"private is not", 200, cc("private"), 2},
		{"private with field names is not", 200, cc(`private="X-Token", max-age=60`), 2},
		{"no-store is not", 200, cc("no-store"), 2},
		{"no-cache is not", 200, cc("no-cache"), 2},
		{"no-cache with field names is not", 200, cc(`no-cache="Set-Cookie"`), 2},
		{"Set-Cookie is not", 200, http.Header{"Set-Cookie": {"session=1"}}, 2},
		{"Set-Cookie with public is not", 200, http.Header{"Set-Cookie": {"session=1"}, "Cache-Control": {"public, max-age=60"}}, 2},
		{"Vary * is not", 200, http.Header{"Vary": {"*"}}, 2},
		{"max-age=0 is not", 200, cc("max-age=0"), 2},
		{"invalid max-age is not", 200, cc("max-age=soon"), 2},
		{"s-maxage=0 wins over max-age=60", 200, cc("max-age=60, s-maxage=0"), 2},
		{"s-maxage=60 wins over max-age=0", 200, cc("max-age=0, s-maxage=60"), 1},
		{"Age past max-age is not", 200, http.Header{"Cache-Control": {"max-age=60"}, "Age": {"60"}}, 2},
		{"Expires at Date is not", 200, http.Header{"Date": {date}, "Expires": {date}}, 2},
		{"invalid Expires is not", 200, http.Header{"Expires": {"0"}}, 2},
		{"Expires after Date is", 200, http.Header{"Date": {date}, "Expires": {"Wed, 02 Jan 2030 03:05:05 GMT"}}, 1},
		{"max-age wins over a past Expires", 200, http.Header{"Date": {date}, "Expires": {date}, "Cache-Control": {"max-age=60"}}, 1},
		{"public is", 200, cc("public"), 1},
		{"203 is", 203, nil, 1},
		{"201 without a lifetime is not", 201, nil, 2},
		{"201 with max-age is", 201, cc("max-age=60"), 1},
		{"201 public is", 201, cc("public"), 1},
		{"206 is not, even with max-age", 206, cc("max-age=60"), 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t, reply{status: tt.status, body: "b", header: tt.header})
			c, _, tr := newClient(t, cached())
			for range 2 {
				if code, body, _ := do(t, c, http.MethodGet, u.URL, nil); code != tt.status || body != "b" {
					t.Fatalf("got %d %q, want %d \"b\"", code, body, tt.status)
				}
			}
			if n := u.hits.Load(); n != tt.hits {
				t.Errorf("upstream hits = %d, want %d", n, tt.hits)
			}
			tr.checkClosed(t)
		})
	}
}

// TestTransport_cacheFreshness: a response is served from the cache for
// its lifetime, bounded by CacheTTL, and loaded again after. The
// transport's clock is a fake the test moves.
func TestTransport_cacheFreshness(t *testing.T) {
	const date = "Wed, 02 Jan 2030 03:04:05 GMT"
	tests := []struct {
		name   string
		header http.Header
		life   time.Duration // how long the response stays fresh
	}{
		{"max-age", http.Header{"Cache-Control": {"max-age=10"}}, 10 * time.Second},
		{"s-maxage wins over max-age", http.Header{"Cache-Control": {"max-age=100, s-maxage=10"}}, 10 * time.Second},
		{"max-age less Age", http.Header{"Cache-Control": {"max-age=30"}, "Age": {"20"}}, 10 * time.Second},
		{"Expires minus Date", http.Header{"Date": {date}, "Expires": {"Wed, 02 Jan 2030 03:04:15 GMT"}}, 10 * time.Second},
		{"CacheTTL bounds a longer max-age", http.Header{"Cache-Control": {"max-age=3600"}}, time.Minute},
		{"CacheTTL without a lifetime", nil, time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpstream(t, reply{status: 200, body: "b", header: tt.header})
			c, ht, tr := newClient(t, cached())
			clock := useFakeClock(ht, time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
			steps := []struct {
				after time.Duration // clock move before the request
				hits  int32         // upstream hits after it
			}{
				{0, 1},
				{tt.life - time.Second, 1}, // still fresh
				{time.Second, 2},           // expired: loaded again
				{0, 2},                     // and kept again
			}
			for i, s := range steps {
				clock.Advance(s.after)
				if code, body, _ := do(t, c, http.MethodGet, u.URL, nil); code != 200 || body != "b" {
					t.Fatalf("request %d: got %d %q, want 200 \"b\"", i+1, code, body)
				}
				if n := u.hits.Load(); n != s.hits {
					t.Fatalf("request %d: upstream hits = %d, want %d", i+1, n, s.hits)
				}
			}
			tr.checkClosed(t)
		})
	}
}

// TestTransport_cacheAge: a response served from the cache says how old it
// is: the upstream's Age plus the time it spent in the cache.
func TestTransport_cacheAge(t *testing.T) {
	u := newUpstream(t, reply{status: 200, body: "b", header: http.Header{"Cache-Control": {"max-age=60"}, "Age": {"3"}}})
	c, ht, _ := newClient(t, cached())
	clock := useFakeClock(ht, time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	if _, _, h := do(t, c, http.MethodGet, u.URL, nil); h.Get("Age") != "3" {
		t.Errorf("first Age = %q, want the upstream's \"3\"", h.Get("Age"))
	}
	clock.Advance(5*time.Second + 500*time.Millisecond)
	if _, _, h := do(t, c, http.MethodGet, u.URL, nil); h.Get("Age") != "8" {
		t.Errorf("cached Age = %q, want \"8\"", h.Get("Age"))
	}
	if n := u.hits.Load(); n != 1 {
		t.Errorf("upstream hits = %d, want 1", n)
	}
}

func TestTransport_cacheTooLargeBody(t *testing.T) {
	big := strings.Repeat("x", 100)
	u := newUpstream(t, reply{status: 200, body: big})
	o := cached()
	o.CacheMaxBody = 10
	c, _, _ := newClient(t, o)
	for range 2 {
		if code, b := get(t, c, u.URL); code != 200 || b != big {
			t.Fatalf("got %d and %d bytes, want 200 and the whole %d-byte body", code, len(b), len(big))
		}
	}
	// Each GET loads for the cache, finds the body too large, then sends
	// on its own.
	if n := u.hits.Load(); n != 4 {
		t.Errorf("upstream hits = %d, want 4", n)
	}
}
