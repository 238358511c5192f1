package resilience

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/cache"
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

// recoverPanic, deferred, turns a panic of the named stage into a
// [*PanicError] in *err. It is the pipeline's one recoverer: the stages
// that run user code (the loader, the default) defer it, and so does
// callHook, for the user's hooks.
func recoverPanic(stage string, err *error) {
	if v := recover(); v != nil {
		*err = panicked(stage, v)
	}
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
// lookThenLockMany) is returned as it is.
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

// errClass is what an error means to the pipeline; [classify] decides it,
// in one place, for every error a stage meets.
type errClass uint8

const (
	// errNone: no error, or an answer rather than a failure (another
	// holder has the lock, a write refused by a newer fence, a lease found
	// lost).
	errNone errClass = iota
	// errCanceled: the caller's (or the shared load's) own context ended.
	// Counts nowhere.
	errCanceled
	// errData: a problem with one key's data: bytes or types that this
	// package did not write, a value the codec cannot encode, an error
	// reply about one key. The key is treated as a miss and counted; the
	// Redis breaker never hears of it, so one bad key cannot make every
	// other key fail open.
	errData
	// errInfra: Redis or the path to it failed (connection refused or
	// broken, no reply in time, a server not ready to serve). Counts
	// against the Redis breaker; the call fails open.
	errInfra
	// errRefused: the Redis breaker is open; the operation did not run.
	errRefused
)

// infraReplies are the Redis error replies that say the server, not the
// key, is in trouble.
var infraReplies = []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY",
	"NOAUTH", "NOPERM", "WRONGPASS", "OOM", "MISCONF", "NOREPLICAS", "UNBLOCKED", "ERR max number of clients"}

// classify decides what err from a Redis operation run under ctx means.
// Loader errors are not classified here: they go to the loader's breaker
// and the fallback chain (see [Builder.IsFailure]).
func classify(ctx context.Context, err error) errClass {
	switch {
	case err == nil, errors.Is(err, backend.ErrNotAcquired), errors.Is(err, backend.ErrNotHeld),
		errors.Is(err, cache.ErrExpiredEntry), errors.Is(err, backend.ErrLockLost):
		return errNone
	case isBreakerRefusal(err):
		return errRefused
	case ctx.Err() != nil:
		return errCanceled
	case errors.Is(err, cache.ErrCodec):
		return errData
	}
	return classifyReply(err)
}

// classifyReply is classify for an error that may be a Redis error reply;
// apart, so that the call without an error allocates nothing.
func classifyReply(err error) errClass {
	var re redis.Error
	if errors.As(err, &re) && !errors.Is(err, redis.ErrClosed) {
		if isDenied(err) { // the ACL refused a command inside a script
			return errInfra
		}
		for _, prefix := range infraReplies {
			if redis.HasErrorPrefix(re, prefix) {
				return errInfra
			}
		}
		return errData
	}
	return errInfra
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
