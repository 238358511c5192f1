// Package breaker is a circuit breaker with the two things a loader
// breaker needs that common breakers leave out: a slow-call threshold (a
// call that succeeds too slowly counts as a failure, as in resilience4j),
// and state-change callbacks that run outside every lock, so a callback may
// call back into the breaker without deadlocking.
//
// A [Breaker] is closed while calls succeed. After Settings.Failures
// consecutive failures (or, with Settings.FailureRatio, a failure rate over
// a rolling window) it opens, and every call is refused with [ErrOpen] for
// Settings.OpenTimeout. Then it lets Settings.HalfOpenProbes calls through;
// if they succeed it closes again, and if one fails it opens again.
//
// The state machine is that of github.com/sony/gobreaker, with a closed
// breaker's calls free of locks and allocations: a call through a closed
// breaker costs a few atomic operations.
package breaker
