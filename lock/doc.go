// Package lock provides the mutual exclusion that lets one process load a cold
// key while others wait: [Memory] within one process, [Redis] across many.
//
// Two durations are kept apart, because conflating them is what makes other
// locks either deadlock or stampede: the lease, how long a holder owns the
// lock before it expires on its own (so a crashed holder cannot block others
// forever), and the wait, how long a waiter is prepared to wait. This package
// owns the lease; the wait belongs to the caller's loop and context.
//
// A lease ([backend.Lease]) is released and extended only with the token
// it was granted under, so a holder whose lease ran out cannot release its
// successor's lock. Every grant carries a fencing number that only grows,
// so a store can refuse a write-back from a superseded holder. [Redis] takes its fences from the
// Redis server's clock as well as a counter, so they keep growing when Redis
// loses the counter (restart without persistence, FLUSHALL, eviction,
// failover), provided the Redis hosts' clocks do not step back by more than
// the outage.
//
// A holder proves it lives by beating: its watchdog ([backend.Lease.KeepAlive])
// extends the lease and records the beat. [Redis] hands a lock whose holder
// has missed two of its own beats to the next TryAcquire, so a crashed or
// partitioned holder is replaced within seconds by exactly one process,
// not at the end of its lease; processes with different settings agree,
// since each holder declares its own beat.
//
// Errors keep three outcomes apart: [backend.ErrNotAcquired] (another
// holder has it), a [*backend.BackendError] (the backend failed;
// errors.Is(err, [backend.ErrBackend])), and the context's own error. The
// lease and the errors are package backend's, which every locker shares,
// this package's and those of the other backends.
//
// A [Notifier] carries "the value for this key has landed" from the holder to
// the waiters, so that waiters are woken by the value rather than by polling.
//
// # Exported names
//
// Users who lock without a pipeline need the lockers ([Memory], [Redis],
// [NewRedis], [RedisOptions], [RedisClient], [DefaultFenceRetention]) and
// the [Locker] interface they share, with package backend's
// [backend.Lease], its errors and [backend.DefaultHeartbeat]. [Redis.Wait]
// lets the owner of a Redis locker wait for its background deletes before
// it leaves.
//
// Users who wake waiters need the notifiers: [Notifier], [MemoryNotifier],
// [RedisNotifier] and [NewRedisNotifier].
//
// The pipeline's own forms (the look that also tries the lock, the batch
// beats and releases, the notifiers' marks, hooks and health) are in
// package internal/rlock, which [Redis] and the notifiers wrap.
//
// Implementers of a backend other than Redis need package backend alone
// ([backend.NewLease] hands out leases with the watchdog this package's
// lockers use).
package lock
