package resilience

import (
	"errors"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/internal/loadcall"
)

// reason names why a fallback answered, for spans and metrics (see
// loadcall.Class.Reason).
func reason(err error) string { return loadcall.Classify(err, isPanic).Reason() }

// panicError is the [*PanicError] of a panic of stage with v.
func panicError(stage string, v any) error { return panicked(stage, v) }

// isPanic reports whether err is a [*PanicError].
func isPanic(err error) bool {
	var pe *PanicError
	return errors.As(err, &pe)
}

// keyErrors returns the [KeyErrors] in err, if any.
func keyErrors(err error) (map[string]error, bool) {
	var ke KeyErrors
	ok := errors.As(err, &ke)
	return ke, ok
}

// breakerObserver returns the OnStateChange of the pipeline's breakers:
// the transition recorded (logged, and in a metric), then the user's
// callbacks. Breakers call it outside their locks.
func (p *Pipeline[V]) breakerObserver(own, all func(string, breaker.State, breaker.State)) func(string, breaker.State, breaker.State) {
	return func(name string, from, to breaker.State) {
		p.tel.BreakerChanged(name, from, to)
		for _, fn := range [...]func(string, breaker.State, breaker.State){own, all} {
			if fn != nil {
				// A panic there must not take down the call that
				// happened to move the breaker.
				_ = callHook("on_state_change", func() { fn(name, from, to) })
			}
		}
	}
}
