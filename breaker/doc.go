// Package breaker is a circuit breaker on github.com/sony/gobreaker/v2
// with the things a loader breaker needs that gobreaker leaves to its
// user: a slow-call threshold (a call that succeeds too slowly counts as a
// failure, as in resilience4j), outcomes that count neither way (a caller
// that gave up), a failure rate over a rolling window, and state-change
// callbacks that run outside every lock, so a callback may call back into
// the breaker without deadlocking.
//
// A [Breaker] is closed while calls succeed. After Settings.Failures
// consecutive failures (or, with Settings.FailureRatio, a failure rate over
// a rolling window) it opens, and every call is refused with [ErrOpen] for
// Settings.OpenTimeout. Then it lets Settings.HalfOpenProbes calls through;
// if they succeed it closes again, and if one fails it opens again.
//
// Calls go through [Breaker.Execute], which runs on gobreaker's Execute
// and, like it, allocates nothing: the function it is given does not
// escape. gobreaker holds its mutex while it admits a call and while it
// records the outcome, never while the call runs; the breaker classifies
// the outcome (Settings.IsFailure, SlowCall) before gobreaker sees it, and
// gobreaker's own OnStateChange, which runs under that mutex, only queues
// the transition for delivery after the call.
//
// # Exported names
//
// Users of the pipeline need [Settings] (Builder.Breaker, and httpx's
// Options.Breaker), the defaults it names, [State] with Closed, Open and
// HalfOpen (in OnStateChange and health reports), and the errors a refused
// or slow call carries ([ErrOpen], [ErrTooManyProbes], [ErrSlowCall]).
// Users who put a breaker around their own calls need [New], [Breaker]'s
// methods and [Ignore], the outcome that counts neither way.
package breaker
