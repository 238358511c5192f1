package resilience

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/cache"
)

// loadClass is what an error of the loader stage means to the stages
// after it. The loader's breaker, the retry, the fallback chain, the
// spans and the metrics all read it from [classifyLoad], so that each
// rule about a loader's error is written once, here. (Errors of Redis and
// of a Backend are classified apart, by classify.)
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
	case isBreakerRefusal(err):
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

func isBreakerRefusal(err error) bool {
	return errors.Is(err, breaker.ErrOpen) || errors.Is(err, breaker.ErrTooManyProbes)
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

// outcome is what a shared load hands every caller that joined it.
type outcome[V any] struct {
	res      Result[V]
	stale    cache.Entry[V] // a stale copy found in L2, for the fallback chain
	hasStale bool
	leadSpan trace.SpanContext // the leader's single-flight span (parent of the shared load), for joiners' links
	// refresh is set for a background refresh: a fresh entry serves it
	// only if written after after, the write time of the entry that
	// triggered it (a refresh by another process, say).
	refresh bool
	after   time.Time
	// gen is the write generation when the load began: its L1 fill is
	// skipped if key was written or dropped since (see write.go).
	gen uint64
}

// accepts reports whether e, found with freshness f, answers the load o
// is for. A refresh takes only an entry written clearly after the one
// that called for it: L1 keeps write times on its monotonic clock and
// gives them back on the wall clock, a few microseconds off either way,
// so the same write read back from L2 must not pass for a newer one.
func (o *outcome[V]) accepts(e *cache.Entry[V], f cache.Freshness) bool {
	return o.want().takes(&e.Written, f)
}

// want is what a look for o takes.
func (o *outcome[V]) want() want { return want{refresh: o.refresh, after: o.after} }

// writtenSlack is how much later than a refresh's entry another entry must
// have been written to count as newer.
const writtenSlack = time.Millisecond

// failOpen marks the outcome as having gone on without Redis because of
// err.
func (o *outcome[V]) failOpen(err error) {
	o.res.FailedOpen = true
	if o.res.FailOpenCause == nil {
		o.res.FailOpenCause = err
	}
}
