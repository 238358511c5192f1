// Package backend is the contract of a coordination service other than
// Redis (a PostgreSQL database, a shared directory) behind a pipeline of
// package resilience, and what an implementation of it needs.
//
// A backend implements [Backend], whose Open returns, for each pipeline
// (its [Scope]), a [Shared] view: a fenced byte [Store] (Load, [Save],
// NextFence), a lock (TryAcquire, Inspect) whose grants are leases made
// with [NewLease] from a [Grant] and released and extended through a
// [Holder], the announcements between processes (Notify, Subscribe,
// Announce, Watch), Ping and Close. A view may also implement
// [SharedMany], the batch forms. Its errors keep outcomes apart:
// [ErrNotAcquired], [ErrNotHeld], [ErrLockLost], and a [*BackendError]
// (matching [ErrBackend]) when the service failed. [Budget] gives an
// operation the caller's context and its timeout, and [DefaultHeartbeat]
// is the holders' default beat.
//
// Package github.com/herdguard/herdguard/backend/backendtest checks an
// implementation: backendtest.Run runs the conformance suite against it.
package backend
