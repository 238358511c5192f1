package resilience

import (
	"context"
	"errors"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/internal/coord"
)

// loadClass is what an error of the loader stage means to the stages
// after it. The loader's breaker, the retry, the fallback chain, the
// spans and the metrics all read it from [classifyLoad], so that each
// rule about a loader's error is written once, here. (Errors of Redis and
// of a Backend are classified apart, by coord.Classify.)
type loadClass uint8

const (
	loadOK       loadClass = iota // no error
	loadNotFound                  // ErrNotFound: an answer, not a failure
	loadCanceled                  // the caller's own cancellation
	loadRefused                   // a breaker refused the call: it did not run
	loadTimedOut                  // an attempt ran out of its own timeout (ErrTimeout)
	loadDeadline                  // a deadline not the attempt's: the caller's or the flight's
	loadPanicked                  // the loader panicked (*PanicError)
	loadFailed                    // any other error
)

// classifyLoad is the class of err, returned by a load.
func classifyLoad(err error) loadClass {
	var pe *PanicError
	switch {
	case err == nil:
		return loadOK
	case errors.Is(err, ErrNotFound):
		return loadNotFound
	case errors.Is(err, context.Canceled):
		return loadCanceled
	case coord.IsRefusal(err):
		return loadRefused
	case errors.Is(err, ErrTimeout):
		return loadTimedOut
	case errors.Is(err, context.DeadlineExceeded):
		return loadDeadline
	case errors.As(err, &pe):
		return loadPanicked
	}
	return loadFailed
}

// reason names why a fallback answered, for spans and metrics
// (herdguard.fallback.reason): breaker_open, timeout, panic or error.
func (c loadClass) reason() string {
	switch c {
	case loadOK:
		return ""
	case loadRefused:
		return "breaker_open"
	case loadTimedOut, loadDeadline:
		return "timeout"
	case loadPanicked:
		return "panic"
	}
	return "error"
}

// reason is the reason of err (see loadClass.reason).
func reason(err error) string { return classifyLoad(err).reason() }

// outcome names how a load ended, for the loads metric: ok, not_found,
// or a reason.
func (c loadClass) outcome() string {
	switch c {
	case loadOK:
		return "ok"
	case loadNotFound:
		return "not_found"
	}
	return c.reason()
}

// retryable reports whether a load that failed so may be tried again
// (RetrySettings.Retryable may still refuse): not an answer, not the
// caller's cancellation, not a refusal, and not a deadline other than the
// attempt's own.
func (c loadClass) retryable() bool {
	switch c {
	case loadOK, loadNotFound, loadCanceled, loadRefused, loadDeadline:
		return false
	}
	return true
}

// isLoadFailure reports whether err is a failure of the loader: what the
// loader's breaker counts and the fallback chain answers. An answer
// (not-found) and the caller's own cancellation are not; a refusal, an
// attempt's timeout and a panic always are; any other error is, unless
// the pipeline's IsFailure says otherwise.
func (p *Pipeline[V]) isLoadFailure(err error) bool {
	switch classifyLoad(err) {
	case loadOK, loadNotFound, loadCanceled:
		return false
	case loadRefused, loadTimedOut, loadPanicked:
		return true
	}
	return p.isFailure == nil || p.userIsFailure(err)
}

// userIsFailure runs the user's IsFailure hook; a panic there counts the
// error as a failure.
func (p *Pipeline[V]) userIsFailure(err error) bool {
	var failure bool
	return callHook("is_failure", func() { failure = p.isFailure(err) }) != nil || failure
}

// breakerObserver returns the OnStateChange of the pipeline's breakers: the
// user's callbacks, then a metric. Breakers call it outside their locks.
func (p *Pipeline[V]) breakerObserver(own, all func(string, breaker.State, breaker.State)) func(string, breaker.State, breaker.State) {
	return func(name string, from, to breaker.State) {
		p.logs.breakerChange(name, from, to)
		for _, fn := range [...]func(string, breaker.State, breaker.State){own, all} {
			if fn != nil {
				// A panic there must not take down the call that
				// happened to move the breaker.
				_ = callHook("on_state_change", func() { fn(name, from, to) })
			}
		}
		if p.tel != nil && p.tel.Metering() {
			p.tel.BreakerState(context.Background(), name, int64(to))
		}
	}
}
