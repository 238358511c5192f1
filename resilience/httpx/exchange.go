package httpx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/internal/retryloop"
	"github.com/herdguard/herdguard/internal/timeout"
)

// drainLimit bounds how much of a discarded body is read, so that its
// connection can be reused; a longer body is closed unread and its
// connection dropped.
const drainLimit = 64 << 10

// exchange sends req, retrying it while Options allow, and returns the
// last response or error. Every response it does not return is drained
// and closed. The attempts run through the retry loop the pipeline's
// Retry stage shares; a Retry-After is the wait hint.
func (t *Transport) exchange(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	br := t.breakerFor(req.URL.Host)
	pol := t.policy
	if !t.o.Idempotent(req) || (hasBody(req) && req.GetBody == nil) {
		pol.MaxAttempts = 1
	}
	return retryloop.Run(ctx, &pol, func(n int) (*http.Response, retryloop.Next, error) {
		areq := req
		if n > 1 {
			var err error
			if areq, err = replay(req); err != nil {
				return nil, retryloop.Next{}, err
			}
		}
		resp, err := t.attempt(br, areq)
		next := retryloop.Next{Retry: retryable(ctx, resp, err)}
		if next.Retry && resp != nil {
			// A Retry-After past MaxRetryAfter (the policy's MaxHint)
			// ends the attempts: the response goes to the caller.
			next.Wait, _ = retryAfter(resp.Header, pol.Now())
		}
		return resp, next, err
	}, discard)
}

// attempt is one round trip behind host's breaker, bounded by
// AttemptTimeout. The returned body cancels the attempt's context when
// closed.
func (t *Transport) attempt(br *breaker.Breaker, req *http.Request) (*http.Response, error) {
	var resp *http.Response
	var err error
	var cancel context.CancelFunc
	ran := false
	refused := br.Execute(func() error {
		ran = true
		var ctx context.Context
		ctx, cancel = context.WithTimeout(req.Context(), t.o.AttemptTimeout)
		resp, err = t.next.RoundTrip(req.WithContext(ctx))
		if err != nil {
			cancel()
			switch {
			case req.Context().Err() != nil:
				// The caller's own context ended: that says nothing
				// about the host, so the attempt counts neither way.
				return breaker.Ignore
			case errors.Is(ctx.Err(), context.DeadlineExceeded):
				err = &timeout.Error{What: "httpx: attempt", After: t.o.AttemptTimeout, Kind: ErrTimeout, Cause: err, ShowCause: true}
			}
			return err
		}
		if failedStatus(resp.StatusCode) { // 5xx and 429: the host is unwell
			return statusError(resp)
		}
		return nil
	})
	if !ran {
		closeBody(req.Body) // never sent: RoundTrip must still close it
		return nil, fmt.Errorf("httpx: %w", refused)
	}
	if err != nil {
		return nil, err
	}
	if resp.Body == nil {
		resp.Body = http.NoBody
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelOnClose releases an attempt's context when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// replay returns a copy of req with a fresh body from GetBody.
func replay(req *http.Request) (*http.Request, error) {
	if !hasBody(req) {
		return req, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, fmt.Errorf("httpx: replaying the request body: %w", err)
	}
	r := req.WithContext(req.Context()) // a shallow copy: req stays as it was
	r.Body = body
	return r, nil
}

// retryable reports whether an attempt's outcome is worth another attempt:
// a transport error or attempt timeout, a 5xx or a 429. Neither an open
// breaker nor the caller's own context is.
func retryable(ctx context.Context, resp *http.Response, err error) bool {
	switch {
	case ctx.Err() != nil:
		return false
	case err != nil:
		return !errors.Is(err, breaker.ErrOpen) && !errors.Is(err, breaker.ErrTooManyProbes)
	}
	return failedStatus(resp.StatusCode)
}

// retryAfter parses a Retry-After header, in delay-seconds or HTTP-date
// form (RFC 9110 section 10.2.3), as a wait from now.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		switch {
		case secs < 0:
			return 0, false
		case secs > math.MaxInt64/int64(time.Second):
			return time.Duration(math.MaxInt64), true
		}
		return time.Duration(secs) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(at.Sub(now), 0), true
}

// discard drains (up to drainLimit) and closes a response nobody will read,
// so that its connection goes back to the pool.
func discard(resp *http.Response) {
	if resp == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, resp.Body, drainLimit)
	_ = resp.Body.Close()
}

func closeBody(b io.Closer) {
	if b != nil {
		_ = b.Close()
	}
}
