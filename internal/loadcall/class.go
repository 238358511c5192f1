package loadcall

import (
	"context"
	"errors"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/coord"
)

// Class is what an error of the loader stage means to the stages after
// it. The loader's breaker, the retry, the fallback chain, the spans and
// the metrics all read it from [Classify], so that each rule about a
// loader's error is written once, here. (Errors of Redis and of a Backend
// are classified apart, by coord.Classify.)
type Class uint8

const (
	OK       Class = iota // no error
	NotFound              // cache.ErrNotFound: an answer, not a failure
	Canceled              // the caller's own cancellation
	Refused               // a breaker refused the call: it did not run
	TimedOut              // an attempt ran out of its own timeout (ErrTimeout)
	Deadline              // a deadline not the attempt's: the caller's or the flight's
	Panicked              // the loader panicked (isPanic)
	Failed                // any other error
)

// Classify is the class of err, returned by a load; isPanic reports
// whether an error is a recovered panic.
func Classify(err error, isPanic func(error) bool) Class {
	switch {
	case err == nil:
		return OK
	case errors.Is(err, cache.ErrNotFound):
		return NotFound
	case errors.Is(err, context.Canceled):
		return Canceled
	case coord.IsRefusal(err):
		return Refused
	case errors.Is(err, ErrTimeout):
		return TimedOut
	case errors.Is(err, context.DeadlineExceeded):
		return Deadline
	case isPanic(err):
		return Panicked
	}
	return Failed
}

// Reason names why a fallback answered, for spans and metrics
// (herdguard.fallback.reason): breaker_open, timeout, panic or error.
func (c Class) Reason() string {
	switch c {
	case OK:
		return ""
	case Refused:
		return "breaker_open"
	case TimedOut, Deadline:
		return "timeout"
	case Panicked:
		return "panic"
	}
	return "error"
}

// Outcome names how a load ended, for the loads metric: ok, not_found,
// or a reason.
func (c Class) Outcome() string {
	switch c {
	case OK:
		return "ok"
	case NotFound:
		return "not_found"
	}
	return c.Reason()
}

// Retryable reports whether a load that failed so may be tried again
// (RetrySettings.Retryable may still refuse): not an answer, not the
// caller's cancellation, not a refusal, and not a deadline other than the
// attempt's own.
func (c Class) Retryable() bool {
	switch c {
	case OK, NotFound, Canceled, Refused, Deadline:
		return false
	}
	return true
}

// IsLoadFailure reports whether err is a failure of the loader: what the
// loader's breaker counts and the fallback chain answers. An answer
// (not-found) and the caller's own cancellation are not; a refusal, an
// attempt's timeout and a panic always are; any other error is, unless
// the pipeline's IsFailure says otherwise.
func (c *Caller) IsLoadFailure(err error) bool {
	switch Classify(err, c.IsPanic) {
	case OK, NotFound, Canceled:
		return false
	case Refused, TimedOut, Panicked:
		return true
	}
	return c.IsFailure == nil || c.userIsFailure(err)
}

// userIsFailure runs the user's IsFailure hook; a panic there counts the
// error as a failure.
func (c *Caller) userIsFailure(err error) bool {
	var failure bool
	return c.hook("is_failure", func() { failure = c.IsFailure(err) }) != nil || failure
}
