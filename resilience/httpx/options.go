package httpx

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/herdguard/herdguard/breaker"
)

// Defaults of [Options]. Each applies when its field is zero.
const (
	DefaultMaxAttempts    = 3
	DefaultAttemptTimeout = 10 * time.Second
	DefaultMaxElapsed     = 30 * time.Second
	DefaultInitialBackoff = 100 * time.Millisecond
	DefaultMaxBackoff     = 2 * time.Second
	DefaultMaxRetryAfter  = 10 * time.Second
	DefaultCacheMaxBody   = 1 << 20
)

// Options configures a [Transport]. The zero value is usable: each zero
// field takes the default it names, and the cache is off.
type Options struct {
	// MaxAttempts is the most attempts of a retried request, the first
	// included. 1 turns retries off.
	// default: 3
	MaxAttempts int
	// AttemptTimeout bounds each attempt, from sending the request to the
	// end of reading the response body: the response the caller gets is
	// still bound by it, as with [http.Client.Timeout]. The whole request,
	// retries included, is bounded by the request's context (and so by
	// the client's Timeout).
	// default: 10 seconds
	AttemptTimeout time.Duration
	// MaxElapsed stops retrying when the next attempt would start later
	// than this after the first one.
	// default: 30 seconds
	MaxElapsed time.Duration
	// InitialBackoff is the first wait between attempts. Each next wait is
	// twice as long, up to MaxBackoff, and every wait is spread at random
	// over ±50% of its value.
	// default: 100 milliseconds
	InitialBackoff time.Duration
	// MaxBackoff caps one wait, before jitter.
	// default: 2 seconds
	MaxBackoff time.Duration
	// MaxRetryAfter is the longest Retry-After the transport waits for. A
	// response asking for a longer wait is not retried: it goes to the
	// caller (or to Fallback), whose own policy decides.
	// default: 10 seconds
	MaxRetryAfter time.Duration
	// Idempotent decides which requests may be retried. A request with a
	// body but no GetBody is never retried, whatever it says.
	// default: [IsIdempotent]
	Idempotent func(req *http.Request) bool
	// Breaker configures the breaker of each host; the breaker of host h
	// is named h, or Breaker.Name + " " + h when Breaker.Name is set.
	// default: the breaker package's defaults: open after 5 consecutive
	// failures, stay open 30 seconds, one half-open probe
	Breaker breaker.Settings
	// CacheTTL, if positive, turns the response cache on and keeps each
	// cached response for at most that long: less when the response's
	// s-maxage, max-age or Expires says so.
	// default: 0 (no cache)
	CacheTTL time.Duration
	// CacheKey decides which requests go through the cache, under which
	// key. It is only called when CacheTTL is positive, and only for
	// requests the cache rules let through (see the package
	// documentation): those rules, such as leaving out requests with
	// credentials or answering Vary, apply whatever CacheKey says. Two
	// requests that get one key share responses, so a key should name
	// the request's target URI, Host included, as DefaultCacheKey's does.
	// A request with a body but no GetBody is never cached.
	// default: [DefaultCacheKey]
	CacheKey func(req *http.Request) (key string, ok bool)
	// CacheCredentials lets requests that carry an Authorization or a
	// Cookie header through the cache. Each is then kept under a key that
	// includes a digest of those headers, so that a response is reused
	// only for a request with the same credentials; the response rules
	// still apply (a private or Set-Cookie response is never kept), and a
	// response to a request with Authorization is kept only if it says
	// public, s-maxage or must-revalidate (RFC 9111 section 3.5). Leave
	// it off unless the upstream's answers to one set of credentials are
	// meant to be reused for them.
	// default: false (requests with credentials bypass the cache)
	CacheCredentials bool
	// CacheMaxBody is the largest body the cache keeps. A response with a
	// larger body is not cached: each caller that shared its exchange
	// sends the request again on its own, without the cache.
	// default: 1 MiB
	CacheMaxBody int64
	// CacheMaxEntries bounds how many responses the cache holds, and
	// apart from them how many keys' Vary headers it remembers.
	// default: 10,000 (resilience.DefaultMaxEntries)
	CacheMaxEntries int
	// Fallback, if not nil, answers a request that the breaker refused or
	// whose last attempt still ended in a transport error, an attempt
	// timeout, a 5xx or a 429. cause says why: a breaker error
	// (errors.Is(cause, breaker.ErrOpen)), a [*StatusError], or the
	// transport's error. req's body has been consumed and must not be
	// read. Fallback is not called when the request's own context ended.
	// default: nil (the failure reaches the caller)
	Fallback func(req *http.Request, cause error) (*http.Response, error)
}

// withDefaults returns o with every zero field set to its default, or an
// error listing every field that makes no sense.
func (o Options) withDefaults() (Options, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, args...)...))
	}
	if o.MaxAttempts < 0 {
		bad("MaxAttempts must not be negative, got %d", o.MaxAttempts)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"AttemptTimeout", o.AttemptTimeout}, {"MaxElapsed", o.MaxElapsed}, {"InitialBackoff", o.InitialBackoff},
		{"MaxBackoff", o.MaxBackoff}, {"MaxRetryAfter", o.MaxRetryAfter}, {"CacheTTL", o.CacheTTL}} {
		if d.v < 0 {
			bad("%s must not be negative, got %v", d.name, d.v)
		}
	}
	if o.CacheMaxBody < 0 {
		bad("CacheMaxBody must not be negative, got %d", o.CacheMaxBody)
	}
	if o.CacheMaxEntries < 0 {
		bad("CacheMaxEntries must not be negative, got %d", o.CacheMaxEntries)
	}
	if o.InitialBackoff > 0 && o.MaxBackoff > 0 && o.MaxBackoff < o.InitialBackoff {
		bad("MaxBackoff (%v) must be at least InitialBackoff (%v)", o.MaxBackoff, o.InitialBackoff)
	}
	if o.CacheTTL == 0 && o.CacheKey != nil {
		bad("CacheKey is set but CacheTTL is 0: set CacheTTL to turn the cache on")
	}
	if o.CacheTTL == 0 && o.CacheCredentials {
		bad("CacheCredentials is set but CacheTTL is 0: set CacheTTL to turn the cache on")
	}
	if _, err := breaker.New(o.Breaker); err != nil {
		bad("Breaker: %v", err)
	}
	if len(errs) > 0 {
		return o, errors.Join(errs...)
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.AttemptTimeout == 0 {
		o.AttemptTimeout = DefaultAttemptTimeout
	}
	if o.MaxElapsed == 0 {
		o.MaxElapsed = DefaultMaxElapsed
	}
	if o.InitialBackoff == 0 {
		o.InitialBackoff = DefaultInitialBackoff
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = max(DefaultMaxBackoff, o.InitialBackoff)
	}
	if o.MaxRetryAfter == 0 {
		o.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if o.Idempotent == nil {
		o.Idempotent = IsIdempotent
	}
	if o.CacheKey == nil {
		o.CacheKey = DefaultCacheKey
	}
	if o.CacheMaxBody == 0 {
		o.CacheMaxBody = DefaultCacheMaxBody
	}
	return o, nil
}

// IsIdempotent reports whether req may be sent more than once: its method
// is idempotent by RFC 9110 section 9.2.2 (GET, HEAD, OPTIONS, TRACE, PUT,
// DELETE), or it carries an Idempotency-Key or X-Idempotency-Key header, the
// rule net/http itself uses.
func IsIdempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	// net/http: a nil value (set to suppress the header) counts too.
	if _, ok := req.Header["Idempotency-Key"]; ok {
		return true
	}
	_, ok := req.Header["X-Idempotency-Key"]
	return ok
}

// DefaultCacheKey caches GET and HEAD requests under method + " " + the
// target URI: the URL, with Request.Host as its authority when set (the
// Host the request is sent for), so that two virtual hosts behind one
// address never share a response (RFC 9111 section 4). It leaves out
// requests whose response is not the whole resource or depends on more
// than the target URI and the request headers: those with a Range header,
// and those with a body. Requests with credentials are left out by the
// transport itself, unless Options.CacheCredentials.
func DefaultCacheKey(req *http.Request) (string, bool) {
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	if method != http.MethodGet && method != http.MethodHead {
		return "", false
	}
	if len(req.Header.Values("Range")) > 0 || hasBody(req) {
		return "", false
	}
	return method + " " + targetURI(req), true
}

func hasBody(req *http.Request) bool { return req.Body != nil && req.Body != http.NoBody }
