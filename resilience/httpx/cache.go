package httpx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

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

// errTooLarge says a response's body passed CacheMaxBody.
var errTooLarge = errors.New("httpx: response body too large to cache")

// uncachedError carries a response the cache must not keep (not 2xx, or
// marked no-store) to every caller that shared its exchange.
type uncachedError struct{ s *snapshot }

func (e *uncachedError) Error() string { return "httpx: response not cacheable: " + e.s.status }

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

// cached serves req through the cache under key. Concurrent misses share
// one exchange, which runs on the pipeline's detached context so that one
// caller leaving does not cancel it for the others.
func (t *Transport) cached(req *http.Request, key string) (*http.Response, error) {
	// The exchange sends bodies made by GetBody; this one is never sent.
	closeBody(req.Body)
	r, err := t.cache.GetResult(req.Context(), key, func(ctx context.Context, _ string) (*snapshot, error) {
		lreq, err := replay(req.WithContext(ctx))
		if err != nil {
			return nil, err
		}
		return t.load(lreq)
	})
	var ue *uncachedError
	switch {
	case err == nil:
		return r.Value.response(req), nil
	case errors.As(err, &ue):
		return t.fallBack(req, ue.s.response(req), nil)
	case errors.Is(err, errTooLarge):
		fresh, err := replay(req)
		if err != nil {
			return nil, err
		}
		return t.send(fresh)
	}
	return t.fallBack(req, nil, err)
}

// load runs the exchange for the cache and reads the response into a
// snapshot.
func (t *Transport) load(req *http.Request) (*snapshot, error) {
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
		body: body,
	}
	if req.Method == http.MethodHead {
		s.contentLength = resp.ContentLength
	}
	if resp.StatusCode/100 != 2 || noStore(resp.Header) {
		return nil, &uncachedError{s}
	}
	return s, nil
}

// noStore reports whether the response forbids caching it (RFC 9111
// section 5.2.2.5).
func noStore(h http.Header) bool {
	for _, v := range h.Values("Cache-Control") {
		for _, d := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(d), "no-store") {
				return true
			}
		}
	}
	return false
}
