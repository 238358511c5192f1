// Package timeout holds the error of an attempt or call that ran out of its
// own deadline, shared by package resilience and package httpx.
package timeout

import (
	"fmt"
	"time"
)

// Error is an attempt or call that ran out of its own deadline. It
// matches Kind (the package's ErrTimeout) and Cause, and reports itself a
// timeout to net/http and [net.Error] checks.
type Error struct {
	What      string // "resilience: loader attempt", "httpx: attempt"
	After     time.Duration
	Kind      error
	Cause     error
	ShowCause bool // the message ends with the cause
}

func (e *Error) Error() string {
	if e.ShowCause {
		return fmt.Sprintf("%s timed out after %v: %v", e.What, e.After, e.Cause)
	}
	return fmt.Sprintf("%s timed out after %v", e.What, e.After)
}

func (e *Error) Unwrap() []error { return []error{e.Kind, e.Cause} }

// Timeout reports true.
func (e *Error) Timeout() bool { return true }
