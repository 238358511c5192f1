package resilience

import (
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/loadcall"
	"github.com/herdguard/herdguard/internal/timeout"
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
	ErrTimeout = loadcall.ErrTimeout
	// ErrClosed is returned by calls on a closed pipeline.
	ErrClosed = errors.New("resilience: pipeline closed")
	// ErrNotFound is what a loader returns to say the key has no value.
	// With a negative TTL set, the outcome is cached. It is the same value
	// as [cache.ErrNotFound].
	ErrNotFound = cache.ErrNotFound
)

// ConfigError reports a configuration that Build refuses.
type ConfigError struct {
	Pipeline string // the pipeline's name
	Field    string // the builder method at fault, such as "Timeout"
	Problem  string // what is wrong and what to change
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("resilience: pipeline %q: %s: %s", e.Pipeline, e.Field, e.Problem)
}

// PanicError is the error every waiter gets when the loader or a
// fallback's Default panics, or the pipeline's own code does (a bug to
// report; a [backend.Backend]'s panic under a look is reported so too). The
// process does not crash. A panic of background work, which has no caller
// left to tell (a Backend's, in a release), is logged at error level with
// its stack, at most once a minute, like the other episodes. A panic elsewhere in the user's
// code is not one: in an IsFailure hook it counts the error as a failure,
// in Retryable it ends the retries, in a Codec it is a codec error
// (cache.ErrCodec: the value is served, not stored), in an OnBreakerChange
// callback it is dropped.
type PanicError struct {
	// Stage says what panicked: "loader", "default" (a fallback's
	// Default), or "pipeline" (the pipeline's own code, or a Backend's
	// under it).
	Stage string
	Value any    // what it panicked with
	Stack []byte // the panicking goroutine's stack
}

func (e *PanicError) Error() string {
	stage := e.Stage
	if stage == "" {
		stage = "loader"
	}
	return fmt.Sprintf("resilience: %s panicked: %v", stage, e.Value)
}

// callHook calls fn, which runs a user's hook (IsFailure, Retryable, a
// breaker's OnStateChange), and returns its panic as a [*PanicError] of
// stage, or nil. The caller decides what a panicking hook means; the
// panic never reaches the call that ran the hook.
func callHook(stage string, fn func()) (err error) {
	defer recoverPanic(stage, &err)
	fn()
	return nil
}

// panicked is the [*PanicError] of a panic of the named stage, with the
// stack of the goroutine that recovered it. A *PanicError panicked with
// again (a panic carried from a goroutine of the call to the caller's, see
// internal/coord's lookThenLockMany) is returned as it is.
func panicked(stage string, v any) *PanicError {
	if pe, ok := v.(*PanicError); ok {
		return pe
	}
	return &PanicError{Stage: stage, Value: v, Stack: debug.Stack()}
}

// Unwrap returns the panic value if it is an error.
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}

// timedOut is an attempt or call (what: "loader attempt" or "call") that
// ran out of its own deadline, after: it matches [ErrTimeout] and cause.
func timedOut(what string, after time.Duration, cause error) error {
	return &timeout.Error{What: "resilience: " + what, After: after, Kind: ErrTimeout, Cause: cause}
}

func wrongCall(name, why string) error {
	return &wrongCallError{name: name, why: why}
}

type wrongCallError struct{ name, why string }

func (e *wrongCallError) Error() string { return "resilience: pipeline " + quote(e.name) + " " + e.why }

func (e *wrongCallError) Unwrap() error { return ErrWrongCall }

func quote(s string) string { return "\"" + s + "\"" }

// KeyErrors are errors of single keys: what a [LoadManyFunc] returns to
// fail some keys of its call, and what [Pipeline.GetMany] returns for the
// keys that got neither a value, a not-found nor a fallback. errors.Is and
// errors.As look into each key's error.
type KeyErrors map[string]error

func (e KeyErrors) Error() string {
	keys := make([]string, 0, len(e))
	for k := range e {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	// Keys may be secrets: the message names none.
	if len(keys) == 0 {
		return "resilience: no key failed"
	}
	return fmt.Sprintf("resilience: %d key(s) failed, the first: %v", len(keys), e[keys[0]])
}

// Unwrap returns each key's error.
func (e KeyErrors) Unwrap() []error {
	out := make([]error, 0, len(e))
	for _, err := range e {
		out = append(out, err)
	}
	return out
}
