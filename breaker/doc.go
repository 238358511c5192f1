// Package breaker is a circuit breaker built on github.com/sony/gobreaker/v2,
// with the two things a loader breaker needs that gobreaker leaves out: a
// slow-call threshold (a call that succeeds too slowly counts as a failure,
// as in resilience4j), and state-change callbacks that run outside every
// lock, so a callback may call back into the breaker without deadlocking.
//
// A [Breaker] is closed while calls succeed. After Settings.Failures
// consecutive failures it opens, and every call is refused with [ErrOpen]
// for Settings.OpenTimeout. Then it lets Settings.HalfOpenProbes calls
// through; if they succeed it closes again, and if one fails it opens again.
package breaker
