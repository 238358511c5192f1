package resilience

import (
	"context"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/keyring"
	"github.com/herdguard/herdguard/lock"
)

// Backend is a coordination service other than Redis, given to
// [Builder.Backend]: a PostgreSQL database (module
// github.com/herdguard/herdguard/backend/postgres) or a directory shared by
// the processes of one host (package
// github.com/herdguard/herdguard/backend/file). With it, the pipeline keeps
// the promises it keeps with Redis: one loader call per cold key across
// processes, fenced write-backs, takeover of a dead holder, waiters woken
// when the value lands, failing open when the backend fails.
type Backend interface {
	// Open returns the view of one pipeline: s.Namespace is the
	// pipeline's name, and pipelines of the same name in different
	// processes share their keys, locks and announcements. The pipeline
	// closes the view when it closes.
	Open(s BackendScope) (Shared, error)
}

// BackendScope is what a pipeline tells its [Backend] when it opens it.
type BackendScope struct {
	// Namespace is the pipeline's name.
	Namespace string
	// Heartbeat is the period at which the pipeline's lock holders beat
	// (LockSettings.Heartbeat): a holder whose last beat is older than two
	// of its beats is dead, and one TryAcquire takes the lock over.
	Heartbeat time.Duration
}

// Shared is one pipeline's view of a [Backend]: the shared store (L2), the
// lock, and the announcements between processes. Its methods are safe for
// concurrent use. The pipeline runs every call through its own breaker and
// operation timeout; an implementation returns the backend's failures as
// errors (wrapped in a *lock.BackendError for the lock's methods) and
// never blocks past ctx.
//
// A view may also have these methods, which the pipeline looks for:
//
//   - System() string names the backend ("postgresql", "file") as the
//     db.system.name of the pipeline's L2 spans;
//   - Subscribed() bool says whether its Watch is established now, for
//     [Health].Subscribed (false without it);
//   - the methods of [SharedMany], for GetMany's looks in a few round
//     trips instead of three per key.
//
// The pipeline serves Shared's Notify and Subscribe to its waiters as a
// lock.Notifier; after a Release it calls Notify itself, so Release need
// not wake anyone (Save with Release must).
type Shared interface {
	// Locker grants leases (made with [lock.NewLease]) whose fences come
	// from the same sequence as [cache.Store.NextFence]'s, and hands the
	// lock of a holder that has missed two of its beats to the next
	// TryAcquire, with Lease.TookOver set.
	lock.Locker
	// Store keeps the values: envelopes the pipeline encodes (and seals,
	// with BackendOptions.Encrypt), stored with their fence in clear.
	cache.Store
	// Notify wakes, in every process, the waiters of key: a value for it
	// landed, or its lock was released. A Save with Release notifies too.
	Notify(ctx context.Context, key string) error
	// Subscribe returns a channel that receives (without blocking the
	// sender; capacity 1 is enough) when key is notified, and a function
	// that ends the subscription. Waiters also poll, so a lost
	// notification costs latency, never correctness.
	Subscribe(key string) (<-chan struct{}, func())
	// Announce tells every process that key was written by Set or
	// Invalidate, so that each drops its in-process copy; origin names
	// the writing pipeline, which ignores its own announcements.
	Announce(ctx context.Context, key, origin string) error
	// Watch makes onWrite hear every announcement (from every process,
	// this one included), and onReset hear that announcements may have
	// been lost (a lost connection re-established): the pipeline then
	// drops its whole in-process cache. It returns a function that ends
	// the watch.
	Watch(onWrite func(key, origin string), onReset func()) (stop func())
	// Ping checks that the backend answers, for Pipeline.Check.
	Ping(ctx context.Context) error
	// Close releases what the view holds (listeners, watchers); it does
	// not close the user's pool or directory.
	Close() error
}

// SharedMany is what a [Shared] view may also implement: the batch forms
// of Load and TryAcquire, which GetMany's looks use in place of one
// Load, one TryAcquire and one more Load per key. Each call comes with
// the operation's budget ([BackendBudget]) and may be of thousands of
// keys: an implementation bounds the size of what it sends at once, and
// counts the timeout from when each of its requests is sent, so that the
// batch's own size is never taken for a failing backend.
type SharedMany interface {
	// LoadMany is Load for many keys: the i-th answer is keys[i]'s, nil
	// when none is stored (an empty stored value is empty, not nil). Its
	// error, a store failure, fails the whole batch.
	LoadMany(ctx context.Context, keys []string) ([][]byte, error)
	// TryAcquireMany is TryAcquire of each of the distinct keys, with the
	// same lease: the i-th lease, or error (lock.ErrNotAcquired, a
	// *lock.BackendError, or ctx's), is keys[i]'s, and a key whose
	// outcome is unknown is cleaned up as TryAcquire's is.
	TryAcquireMany(ctx context.Context, keys []string, lease time.Duration) ([]*lock.Lease, []error)
}

// BackendOptions configures the pipeline's use of a [Backend]. Zero fields
// take defaults.
type BackendOptions struct {
	// Codec encodes values.
	// default: cache.JSON
	Codec cache.Codec
	// OpTimeout bounds each backend operation, from when the backend
	// sends it (see BackendBudget): the burst's own wait for a
	// connection does not count.
	// default: 1 second (DefaultBackendTimeout)
	OpTimeout time.Duration
	// Breaker configures the pipeline's breaker around backend
	// operations, as RedisOptions.Breaker does around Redis's.
	// default: as for Redis, named "backend"
	Breaker breaker.Settings
	// SharedBreaker, if not nil, is used instead of a breaker of the
	// pipeline's own.
	SharedBreaker *breaker.Breaker
	// Encrypt, if not nil, seals every value stored in the backend, as
	// RedisOptions.Encrypt does in Redis.
	// default: nil (values stored in clear)
	Encrypt *keyring.Ring
}
