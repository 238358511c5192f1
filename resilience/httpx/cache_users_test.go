package httpx_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestTransport_cacheVary: once a response names the headers it varies
// on, each combination of their values has its own entry; an absent
// header is not an empty one.
func TestTransport_cacheVary(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Vary", "accept-language")
		fmt.Fprint(w, answerFor(r.Header, "Accept-Language"))
	}))
	t.Cleanup(srv.Close)
	c, _, _ := newClient(t, cached())
	lang := func(v string) http.Header { return http.Header{"Accept-Language": {v}} }
	steps := []struct {
		header http.Header
		hits   int32 // upstream hits after the request
	}{
		{lang("en"), 1}, // reveals the Vary: kept under its variant key
		{lang("en"), 1},
		{lang("fr"), 2},
		{lang("fr"), 2},
		{nil, 3},
		{nil, 3},
		{lang(""), 4},
		{lang(""), 4},
		{lang("en"), 4},
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

// answerFor is the body a server answers for the values of header name
// in h: absent and empty differ.
func answerFor(h http.Header, name string) string {
	v, ok := h[name]
	return fmt.Sprintf("%s=%q present=%v", name, v, ok)
}

// profiles is an upstream that answers "profile of <user>", the user
// named by the request's "user" cookie, its Authorization or its X-User
// header. Each answer may carry a Set-Cookie for that user and more
// headers. The first hit waits for release, if set.
type profiles struct {
	*httptest.Server
	status    int // 0: 200
	setCookie bool
	header    http.Header
	hits      atomic.Int32
	arrived   chan struct{} // closed when the first hit arrives
	release   chan struct{} // nil: do not wait
}

func newProfiles(t *testing.T, setCookie bool, header http.Header, release chan struct{}) *profiles {
	t.Helper()
	p := &profiles{setCookie: setCookie, header: header, arrived: make(chan struct{}), release: release}
	p.Server = httptest.NewServer(p)
	t.Cleanup(p.Close)
	return p
}

func (p *profiles) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.hits.Add(1) == 1 {
		close(p.arrived)
		if p.release != nil {
			select {
			case <-p.release:
			case <-r.Context().Done():
				return
			}
		}
	}
	user := r.Header.Get("X-User")
	if c, err := r.Cookie("user"); err == nil {
		user = c.Value
	}
	if a := r.Header.Get("Authorization"); a != "" {
		user = strings.TrimPrefix(a, "Bearer ")
	}
	for k, v := range p.header {
		w.Header()[k] = v
	}
	if p.setCookie {
		w.Header().Set("Set-Cookie", "session="+user)
	}
	if p.status != 0 {
		w.WriteHeader(p.status)
	}
	fmt.Fprint(w, "profile of "+user)
}

// checkOwn fails t unless a response to user's request is user's own:
// their profile, and no other user's cookie.
func checkOwn(t *testing.T, user, body string, h http.Header) {
	t.Helper()
	if body != "profile of "+user {
		t.Errorf("%s got %q", user, body)
	}
	for _, sc := range h.Values("Set-Cookie") {
		if sc != "session="+user {
			t.Errorf("%s got the cookie %q", user, sc)
		}
	}
}

// TestTransport_cacheTwoUsers: alice's response never reaches bob, in
// every way the upstream can tie a response to its user.
func TestTransport_cacheTwoUsers(t *testing.T) {
	cookie := func(u string) http.Header { return http.Header{"Cookie": {"user=" + u}} }
	bearer := func(u string) http.Header { return http.Header{"Authorization": {"Bearer " + u}} }
	xUser := func(u string) http.Header { return http.Header{"X-User": {u}} }
	tests := []struct {
		name      string
		creds     bool // Options.CacheCredentials
		who       func(user string) http.Header
		setCookie bool
		header    http.Header
		hits      int32 // for alice, bob, alice, bob
	}{
		{"Cookie on the request", false, cookie, false, nil, 4},
		{"Cookie on the request, both cookies answered", false, cookie, true, nil, 4},
		{"Authorization on the request", false, bearer, false, nil, 4},
		{"Cookie with CacheCredentials: one entry each", true, cookie, false, nil, 2},
		{"Authorization with CacheCredentials: no entry (RFC 9111 section 3.5)", true, bearer, false, nil, 4},
		{"Authorization with CacheCredentials, public: one entry each", true, bearer, false, http.Header{"Cache-Control": {"public"}}, 2},
		{"Set-Cookie with CacheCredentials: no entry", true, cookie, true, nil, 4},
		{"Set-Cookie on the response", false, xUser, true, nil, 4},
		{"Cache-Control private", false, xUser, false, http.Header{"Cache-Control": {"private"}}, 4},
		{"Cache-Control no-store", false, xUser, false, http.Header{"Cache-Control": {"no-store"}}, 4},
		{"Vary on the user's header", false, xUser, false, http.Header{"Vary": {"X-User"}}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newProfiles(t, tt.setCookie, tt.header, nil)
			o := cached()
			o.CacheCredentials = tt.creds
			c, _, tr := newClient(t, o)
			for _, user := range []string{"alice", "bob", "alice", "bob"} {
				_, body, h := do(t, c, http.MethodGet, p.URL, tt.who(user))
				checkOwn(t, user, body, h)
			}
			if n := p.hits.Load(); n != tt.hits {
				t.Errorf("upstream hits = %d, want %d", n, tt.hits)
			}
			tr.checkClosed(t)
		})
	}
}

// joinSignal is a context that reports when a caller first waits on its
// Done channel. The pipeline's single flight does that once the caller has
// joined the flight: nothing earlier on the request's path (the client
// sets no deadline) asks for Done.
type joinSignal struct {
	context.Context
	once    sync.Once
	waiting chan struct{}
}

func (c *joinSignal) Done() <-chan struct{} {
	c.once.Do(func() { close(c.waiting) })
	return c.Context.Done()
}

// TestTransport_cacheTwoUsersShareOneExchange: bob's request joins the
// exchange of alice's, still under way. A response tied to alice reaches
// only her; bob sends his own. A response nothing ties to a user answers
// both.
func TestTransport_cacheTwoUsersShareOneExchange(t *testing.T) {
	tests := []struct {
		name      string
		status    int // 0: 200
		setCookie bool
		header    http.Header
		bobGets   string // "": his own profile
		hits      int32
	}{
		{"Set-Cookie", 0, true, nil, "", 2},
		{"Cache-Control private", 0, false, http.Header{"Cache-Control": {"private"}}, "", 2},
		{"Cache-Control no-store", 0, false, http.Header{"Cache-Control": {"no-store"}}, "", 2},
		{"Cache-Control no-cache", 0, false, http.Header{"Cache-Control": {"no-cache"}}, "", 2},
		{"Vary on the user's header", 0, false, http.Header{"Vary": {"X-User"}}, "", 2},
		{"Vary *", 0, false, http.Header{"Vary": {"*"}}, "", 2},
		{"404 with Set-Cookie", 404, true, nil, "", 2},
		// The upstream said nothing that ties the answer to alice: a
		// shared cache may answer bob with it, kept (a 200) or not (a
		// 404).
		{"nothing ties it to alice", 0, false, nil, "profile of alice", 1},
		{"nothing ties the 404 to alice", 404, false, nil, "profile of alice", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			release := make(chan struct{})
			p := newProfiles(t, tt.setCookie, tt.header, release)
			p.status = tt.status
			c, _, tr := newClient(t, cached())
			type answer struct {
				body string
				h    http.Header
			}
			get := func(ctx context.Context, user string, into chan<- answer) {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL, nil)
				req.Header.Set("X-User", user)
				resp, err := c.Do(req)
				if err != nil {
					t.Error(err)
					into <- answer{}
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close() // before the answer: the test then checks it
				into <- answer{string(b), resp.Header}
			}
			alice, bob := make(chan answer, 1), make(chan answer, 1)
			go get(context.Background(), "alice", alice)
			waitOn(t, p.arrived, "alice's request at the upstream")
			joined := &joinSignal{Context: context.Background(), waiting: make(chan struct{})}
			go get(joined, "bob", bob)
			waitOn(t, joined.waiting, "bob joining alice's exchange")
			close(release)

			a := <-alice
			checkOwn(t, "alice", a.body, a.h)
			b := <-bob
			if tt.bobGets == "" {
				checkOwn(t, "bob", b.body, b.h)
			} else if b.body != tt.bobGets {
				t.Errorf("bob got %q, want %q", b.body, tt.bobGets)
			}
			if n := p.hits.Load(); n != tt.hits {
				t.Errorf("upstream hits = %d, want %d", n, tt.hits)
			}
			tr.checkClosed(t)
		})
	}
}

// waitOn waits for ch to close, failing t if that takes unreasonably
// long (a hang, not a timing assumption).
func waitOn(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("still waiting for %s", what)
	}
}
