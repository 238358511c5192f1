package httpx

import (
	"errors"
	"fmt"
	"net/http"
)

var (
	// ErrInvalidOptions is matched by the error [New] and [NewClient]
	// return for options that make no sense.
	ErrInvalidOptions = errors.New("httpx: invalid options")
	// ErrTimeout is matched by the error of an attempt that ran out of
	// Options.AttemptTimeout. The error also matches
	// [context.DeadlineExceeded].
	ErrTimeout = errors.New("httpx: attempt timed out")
	// ErrFallback is matched by the error of a request whose
	// Options.Fallback failed. The error also matches the fallback's own
	// error and the cause that sent the request to the fallback.
	ErrFallback = errors.New("httpx: fallback failed")
)

// StatusError is the cause handed to Options.Fallback, and recorded by the
// breaker, when the upstream answered with a failing status.
type StatusError struct {
	// StatusCode is the response's status code, such as 503.
	StatusCode int
	// Status is the response's status line, such as "503 Service Unavailable".
	Status string
}

func (e *StatusError) Error() string { return "httpx: upstream answered " + e.Status }

func statusError(resp *http.Response) *StatusError {
	s := resp.Status
	if s == "" {
		s = fmt.Sprintf("%d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	return &StatusError{StatusCode: resp.StatusCode, Status: s}
}

// fallbackError is a fallback that failed; it keeps both errors.
type fallbackError struct{ err, cause error }

func (e *fallbackError) Error() string {
	return fmt.Sprintf("httpx: fallback failed: %v (after: %v)", e.err, e.cause)
}

func (e *fallbackError) Unwrap() []error { return []error{ErrFallback, e.err, e.cause} }
