package httpx

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/herdguard/herdguard/internal/retryloop"
	"github.com/herdguard/herdguard/resilience"
)

// Transport is an [http.RoundTripper] that sends requests through a cache,
// retries, a breaker per host and per-attempt timeouts; see the package
// documentation. It is safe for concurrent use.
type Transport struct {
	next   http.RoundTripper
	o      Options                         // defaults applied
	cache  *resilience.Pipeline[*snapshot] // nil unless Options.CacheTTL
	varies *varies                         // nil unless Options.CacheTTL

	// breakers maps a host to its *breaker.Breaker. Read on every request,
	// written once per host: a sync.Map keeps the reads lock-free.
	breakers sync.Map

	// policy is the retry loop's policy from o. Its clock is time.Now and
	// retryloop.Sleep, unless a test replaced them before the first
	// request.
	policy retryloop.Policy
}

var _ http.RoundTripper = (*Transport)(nil)

// New returns a Transport that sends requests through next, configured by
// o. next nil means [http.DefaultTransport]. It returns an error matching
// [ErrInvalidOptions] for options that make no sense.
func New(next http.RoundTripper, o Options) (*Transport, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	if next == nil {
		next = http.DefaultTransport
	}
	t := &Transport{next: next, o: o, policy: retryloop.Policy{
		MaxAttempts:         o.MaxAttempts,
		Initial:             o.InitialBackoff,
		Multiplier:          2,
		RandomizationFactor: 0.5,
		Max:                 o.MaxBackoff,
		MaxElapsed:          o.MaxElapsed,
		MaxHint:             o.MaxRetryAfter,
		Now:                 time.Now,
		Sleep:               retryloop.Sleep,
	}}
	if o.CacheTTL > 0 {
		if t.cache, err = newCache(o); err != nil {
			return nil, fmt.Errorf("httpx: building the cache: %w", err)
		}
		t.varies = newVaries(o)
	}
	return t, nil
}

// NewClient returns a copy of c whose Transport is c's own transport
// wrapped by [New]. c nil means a zero [http.Client]. c's Timeout, if set,
// bounds each request with its retries and waits.
func NewClient(c *http.Client, o Options) (*http.Client, error) {
	if c == nil {
		c = &http.Client{}
	}
	t, err := New(c.Transport, o)
	if err != nil {
		return nil, err
	}
	cc := *c
	cc.Transport = t
	return &cc, nil
}

// RoundTrip sends req through the transport's stages. Like every
// RoundTripper, it closes req's body, also on errors, and does not modify
// req.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil {
		closeBody(req.Body)
		return nil, errors.New("httpx: nil Request.URL")
	}
	if t.cache != nil && (!hasBody(req) || req.GetBody != nil) && t.usesCache(req) {
		if key, ok := t.o.CacheKey(req); ok {
			return t.cached(req, key)
		}
	}
	return t.send(req)
}

// send is a request without the cache: the exchange, then the fallback.
func (t *Transport) send(req *http.Request) (*http.Response, error) {
	resp, err := t.exchange(req)
	return t.fallBack(req, resp, err)
}

// fallBack hands a request whose exchange failed (err, or a failing status
// in resp) to Options.Fallback. Otherwise, or when the caller's own context
// ended, it returns resp and err as they are.
func (t *Transport) fallBack(req *http.Request, resp *http.Response, err error) (*http.Response, error) {
	if t.o.Fallback == nil || req.Context().Err() != nil {
		return resp, err
	}
	cause := err
	if err == nil {
		if !failedStatus(resp.StatusCode) {
			return resp, nil
		}
		cause = statusError(resp)
		discard(resp)
	}
	fr, ferr := t.o.Fallback(req, cause)
	switch {
	case ferr != nil:
		return nil, &fallbackError{err: ferr, cause: cause}
	case fr == nil:
		return nil, &fallbackError{err: errors.New("httpx: Fallback returned neither a response nor an error"), cause: cause}
	}
	if fr.Body == nil {
		fr.Body = http.NoBody
	}
	if fr.Request == nil {
		fr.Request = req
	}
	return fr, nil
}

// failedStatus reports whether a status says the host is unwell: it
// counts against the host's breaker, sends the request to the fallback
// and, for an idempotent request, to another attempt. 429 is one: a host
// that throttles is overloaded, and backing off helps it recover.
func failedStatus(code int) bool {
	return code >= 500 || code == http.StatusTooManyRequests
}

// CloseIdleConnections closes the idle connections of the wrapped
// transport, if it has such a method; [http.Client.CloseIdleConnections]
// calls it.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
