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

	"github.com/cenkalti/backoff/v4"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/internal/timeout"
)

// drainLimit bounds how much of a discarded body is read, so that its
// connection can be reused; a longer body is closed unread and its
// connection dropped.
const drainLimit = 64 << 10

// exchange sends req, retrying it while Options allow, and returns the
// last response or error. Every response it does not return is drained
// and closed.
func (t *Transport) exchange(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	br := t.breakerFor(req.URL.Host)
	retry := t.o.MaxAttempts > 1 && t.o.Idempotent(req) && (!hasBody(req) || req.GetBody != nil)
	var bo backoff.BackOff // made on the first retry: most requests need none
	start := t.now()
	for n := 1; ; n++ { // bounded by MaxAttempts
		areq := req
		if n > 1 {
			var err error
			if areq, err = replay(req); err != nil {
				return nil, err
			}
		}
		resp, err := t.attempt(br, areq)
		if !retry || n >= t.o.MaxAttempts || !retryable(ctx, resp, err) {
			return resp, err
		}
		if bo == nil {
			bo = t.newBackOff()
		}
		wait, ok := t.nextWait(bo, resp, start)
		if !ok {
			return resp, err
		}
		discard(resp)
		if err := t.wait(ctx, wait); err != nil {
			return nil, err
		}
	}
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

// newBackOff returns a fresh backoff for one request: backoff state is never
// shared between requests.
func (t *Transport) newBackOff() backoff.BackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(t.o.InitialBackoff),
		backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(0.5),
		backoff.WithMaxInterval(t.o.MaxBackoff),
		backoff.WithMaxElapsedTime(0), // nextWait applies MaxElapsed, Retry-After included
	)
}

// nextWait returns how long to wait before the next attempt: the backoff,
// or the response's Retry-After if longer. ok is false when the wait would
// pass MaxRetryAfter or MaxElapsed.
func (t *Transport) nextWait(bo backoff.BackOff, resp *http.Response, start time.Time) (wait time.Duration, ok bool) {
	wait = bo.NextBackOff()
	if wait == backoff.Stop {
		return 0, false
	}
	if resp != nil {
		if ra, found := retryAfter(resp.Header, t.now()); found {
			if ra > t.o.MaxRetryAfter {
				return 0, false
			}
			wait = max(wait, ra)
		}
	}
	if t.now().Sub(start)+wait > t.o.MaxElapsed {
		return 0, false
	}
	return wait, true
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

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
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
