package httpx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/herdguard/herdguard/resilience"
)

// snapshot is a response as the cache keeps it. It is never modified once
// made, so callers may share it; each gets its own [*http.Response].
type snapshot struct {
	status        string
	statusCode    int
	proto         string
	protoMajor    int
	protoMinor    int
	header        http.Header
	contentLength int64
	uncompressed  bool
	body          []byte

	received time.Time     // by the transport's clock
	age      time.Duration // the Age the upstream gave it
	expires  time.Time     // by the transport's clock; zero if not kept
}

// response builds a fresh response of s for req, with its own body reader.
func (s *snapshot) response(req *http.Request) *http.Response {
	return &http.Response{
		Status: s.status, StatusCode: s.statusCode,
		Proto: s.proto, ProtoMajor: s.protoMajor, ProtoMinor: s.protoMinor,
		Header:        s.header.Clone(),
		Body:          io.NopCloser(bytes.NewReader(s.body)),
		ContentLength: s.contentLength,
		Uncompressed:  s.uncompressed,
		Request:       req,
	}
}

// stored builds a response of s served from the cache at now: its Age
// header says how old it is, in whole seconds (RFC 9111 section 5.1).
func (s *snapshot) stored(req *http.Request, now time.Time) *http.Response {
	resp := s.response(req)
	resp.Header.Set("Age", strconv.FormatInt(int64(s.ageAt(now)/time.Second), 10))
	return resp
}

// ageAt is s's age at now: the Age the upstream gave it plus the time it
// has spent here.
func (s *snapshot) ageAt(now time.Time) time.Duration {
	return s.age + max(now.Sub(s.received), 0)
}

// errTooLarge says a response's body passed CacheMaxBody.
var errTooLarge = errors.New("httpx: response body too large to cache")

// uncachedError carries a response the cache does not keep (see [judge])
// out of the shared exchange that fetched it. It reaches every caller
// that shared the exchange; only the caller whose request was sent
// (owner) may use it, unless shared says all may.
type uncachedError struct {
	s      *snapshot
	owner  *http.Request
	shared bool
}

func (e *uncachedError) Error() string { return "httpx: response not cacheable: " + e.s.status }

// isFor reports whether req's caller may be answered with e's response.
func (e *uncachedError) isFor(req *http.Request) bool { return e.shared || e.owner == req }

func newCache(o Options) (*resilience.Pipeline[*snapshot], error) {
	// The pipeline's timeouts bound the shared exchange, which runs
	// detached from its callers' contexts; they must leave room for every
	// attempt and wait the retry policy allows.
	bound := o.MaxElapsed + 2*o.AttemptTimeout
	b := resilience.New[*snapshot]("httpx").Cache(o.CacheTTL).SingleFlight().Timeout(bound).FlightTimeout(bound)
	if o.CacheMaxEntries > 0 {
		b = b.MaxEntries(o.CacheMaxEntries)
	}
	return b.Build()
}

// cached serves req through the cache under the entry key of base.
// Concurrent misses for one key share one exchange, which runs on the
// pipeline's detached context so that one caller leaving does not cancel
// it for the others. A stored response that has expired, or that req does
// not accept (its max-age or min-fresh, see [accepts]), is dropped and
// loaded again: the newer response takes its place.
func (t *Transport) cached(req *http.Request, base string) (*http.Response, error) {
	// The exchange sends bodies made by GetBody; this one is never sent.
	closeBody(req.Body)
	vary := t.varies.of(base)
	key := entryKey(req, base, vary, t.o.CacheCredentials)
	load := func(ctx context.Context, _ string) (*snapshot, error) {
		lreq, err := replay(req.WithContext(ctx))
		if err != nil {
			return nil, err
		}
		return t.load(lreq, req, base, vary)
	}
	// The pipeline keeps entries for CacheTTL; a response that said it
	// is fresh for less is dropped once its time has passed, and loaded
	// again. The second turn only meets a stored entry if another caller
	// stored one in between, which req does not accept either: req then
	// goes alone.
	for range 2 {
		r, err := t.cache.GetResult(req.Context(), key, load)
		if err == nil && r.Source == resilience.SourceL1 {
			s, now := r.Value, t.policy.Now()
			if now.Before(s.expires) && accepts(req, s.ageAt(now), s.expires.Sub(now)) {
				// A kept 501 is still a failing status: to Fallback.
				return t.fallBack(req, s.stored(req, now), nil)
			}
			// Detached: the entry is dropped whether or not this caller
			// stays.
			_ = t.cache.Invalidate(context.WithoutCancel(req.Context()), key)
			continue
		}
		return t.answer(req, r.Value, err)
	}
	return t.sendOwn(req)
}

// answer turns what the pipeline returned for a miss into req's response.
func (t *Transport) answer(req *http.Request, s *snapshot, err error) (*http.Response, error) {
	var ue *uncachedError
	switch {
	case err == nil:
		return t.fallBack(req, s.response(req), nil)
	case errors.As(err, &ue) && ue.isFor(req):
		return t.fallBack(req, ue.s.response(req), nil)
	case errors.As(err, &ue), errors.Is(err, errTooLarge):
		return t.sendOwn(req)
	}
	return t.fallBack(req, nil, err)
}

// sendOwn sends req on its own, without the cache.
func (t *Transport) sendOwn(req *http.Request) (*http.Response, error) {
	fresh, err := replay(req)
	if err != nil {
		return nil, err
	}
	return t.send(fresh)
}

// load runs the exchange of req for the cache, on behalf of owner's
// caller, and reads the response into a snapshot. vary is what the key
// covers of the request's headers.
func (t *Transport) load(req, owner *http.Request, base string, vary []string) (*snapshot, error) {
	resp, err := t.exchange(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, t.o.CacheMaxBody+1))
	if err != nil {
		return nil, fmt.Errorf("httpx: reading the response body: %w", err)
	}
	if int64(len(body)) > t.o.CacheMaxBody {
		return nil, errTooLarge
	}
	s := &snapshot{
		status: resp.Status, statusCode: resp.StatusCode,
		proto: resp.Proto, protoMajor: resp.ProtoMajor, protoMinor: resp.ProtoMinor,
		header: resp.Header.Clone(), contentLength: int64(len(body)), uncompressed: resp.Uncompressed,
		body:     body,
		received: t.policy.Now(),
	}
	s.age, _ = deltaSeconds(resp.Header.Get("Age"))
	if req.Method == http.MethodHead {
		s.contentLength = resp.ContentLength
	}
	t.varies.learn(base, resp.Header)
	authorized := len(req.Header.Values("Authorization")) > 0
	if names, _ := varyNames(resp.Header); !covers(vary, names) {
		covered := union(vary, names)
		v := judge(resp, covered, authorized, s.received, t.o.CacheTTL)
		return nil, t.storeVariant(req, owner, base, covered, s, v)
	}
	v := judge(resp, vary, authorized, s.received, t.o.CacheTTL)
	if v.ttl <= 0 {
		return nil, &uncachedError{s: s, owner: owner, shared: v.shared}
	}
	s.expires = s.received.Add(v.ttl)
	return s, nil
}

// storeVariant keeps s, the response to req whose Vary names headers the
// key of req did not cover, under its variant key, the one that covers
// them (RFC 9111 section 4.1), if v lets it be kept. Its answer reaches
// only owner's caller: the callers that shared the exchange may differ in
// those headers, so they send their own requests.
func (t *Transport) storeVariant(req, owner *http.Request, base string, covered []string, s *snapshot, v verdict) error {
	if v.ttl > 0 {
		s.expires = s.received.Add(v.ttl)
		// The exchange's own detached context: the pipeline bounds it.
		_ = t.cache.Set(req.Context(), entryKey(req, base, covered, t.o.CacheCredentials), s)
	}
	return &uncachedError{s: s, owner: owner, shared: false}
}
