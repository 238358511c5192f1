package resilience

import (
	"errors"
	"fmt"

	"github.com/herdguard/herdguard/cache"
)

var (
	// ErrNilContext is returned by a call made with a nil context.
	ErrNilContext = errors.New("resilience: nil context")
	// ErrEmptyKey is returned by Get with an empty key.
	ErrEmptyKey = errors.New("resilience: empty key")
	// ErrNilLoader is returned by a call made with a nil loader.
	ErrNilLoader = errors.New("resilience: nil loader")
	// ErrWrongCall is returned by Get on a keyless pipeline, and by Do on a
	// pipeline with stages that need a key.
	ErrWrongCall = errors.New("resilience: call does not fit the pipeline")
	// ErrTimeout is matched by the error of a loader attempt that ran out
	// of its Timeout, and of a call that ran out of its CallTimeout.
	ErrTimeout = errors.New("resilience: timeout")
	// ErrClosed is returned by calls on a closed pipeline.
	ErrClosed = errors.New("resilience: pipeline closed")
	// ErrNotFound is what a loader returns to say the key has no value.
	// With a negative TTL set, the outcome is cached. It is the same value
	// as [cache.ErrNotFound].
	ErrNotFound = cache.ErrNotFound
)

// ConfigError reports a configuration that Build refuses.
type ConfigError struct {
	Pipeline string
	Field    string // the builder method at fault, such as "Timeout"
	Problem  string // what is wrong and what to change
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("resilience: pipeline %q: %s: %s", e.Pipeline, e.Field, e.Problem)
}

// PanicError is the error every waiter gets when the loader panics. The
// process does not crash.
type PanicError struct {
	Value any    // what the loader panicked with
	Stack []byte // the loader goroutine's stack at the panic
}

func (e *PanicError) Error() string { return fmt.Sprintf("resilience: loader panicked: %v", e.Value) }

// Unwrap returns the panic value if it is an error.
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}

// timeoutError is an attempt or call that ran out of its own deadline.
type timeoutError struct {
	what  string // "loader attempt" or "call"
	after string
	cause error
}

func (e *timeoutError) Error() string {
	return fmt.Sprintf("resilience: %s timed out after %s", e.what, e.after)
}

func (e *timeoutError) Unwrap() []error { return []error{ErrTimeout, e.cause} }
