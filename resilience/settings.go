package resilience

import (
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/coord"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/internal/settings"
	"github.com/herdguard/herdguard/keyring"
)

// Defaults of the builder. Each applies when the matching builder method is
// not called (the methods refuse zero and negative durations and counts,
// save Jitter(0), which turns jitter off), or to a zero field of
// [LockSettings], [RedisOptions] or [RetrySettings].
const (
	// DefaultMaxEntries bounds the in-process cache.
	DefaultMaxEntries = rcache.DefaultMaxEntries
	// DefaultJitter spreads TTLs over their last 10%.
	DefaultJitter = settings.DefaultJitter
	// DefaultTimeout bounds one loader attempt of a keyed pipeline. A
	// [Builder.Keyless] pipeline has no attempt timeout unless
	// [Builder.Timeout] sets one: its calls are bounded by the caller's
	// context and [Builder.CallTimeout].
	DefaultTimeout = settings.DefaultTimeout
	// DefaultFlightTimeout bounds a shared load, which runs detached from
	// its callers' contexts so that one caller leaving does not cancel it
	// for the others.
	DefaultFlightTimeout = settings.DefaultFlightTimeout
	// DefaultLockLease is how long a lock holder owns the lock before it
	// expires on its own; a watchdog extends it while the loader runs.
	DefaultLockLease = settings.DefaultLockLease
	// DefaultLockMaxWait caps the wait while the holder is still alive
	// (beating).
	DefaultLockMaxWait = settings.DefaultLockMaxWait
	// DefaultLockHeartbeat is how often a holder beats (extends its lease
	// and records that it lives); a holder silent for two beats is taken
	// over by one waiter.
	DefaultLockHeartbeat = settings.DefaultLockHeartbeat
	// DefaultRedisTimeout bounds each Redis operation.
	DefaultRedisTimeout = coord.DefaultRedisTimeout
	// DefaultBackendTimeout bounds each operation of a [backend.Backend], from
	// when the backend sends it (see [backend.Budget]). It is longer than
	// Redis's: a database statement serves a batch of calls, may wait for
	// another process's row locks, and prepares itself on the first use
	// of a new connection; on a busy two-core machine such statements
	// took up to about 650 ms while the database was answering.
	DefaultBackendTimeout = coord.DefaultBackendTimeout
	// DefaultRedisOpenTimeout is how long the Redis breaker stays open
	// before it lets one probe through: a failed Redis costs one operation
	// a second, and a Redis that is back (restarted, or a Cluster replica
	// promoted) serves again within about a second.
	DefaultRedisOpenTimeout = coord.DefaultOpenTimeout
	// DefaultRedisFailureRatio opens the Redis breaker when half the
	// operations of the last 10 seconds failed, from 20 operations on.
	DefaultRedisFailureRatio = coord.DefaultFailureRatio
	// DefaultPrefix prefixes every Redis key.
	DefaultPrefix = rkey.DefaultPrefix
)

// LockSettings configures the distributed lock. Zero fields take defaults.
type LockSettings struct {
	// Lease is how long a holder owns the lock.
	// default: 30 seconds (DefaultLockLease)
	Lease time.Duration
	// MaxWait caps the wait while the holder is alive; past it, a waiter
	// loads without the lock. Waiters do not guess whether the holder
	// lives from how long they have waited: they see its heartbeat, and
	// one of them takes a dead holder over (under a new grant) as soon as
	// it misses two beats.
	// default: 30 seconds (DefaultLockMaxWait)
	MaxWait time.Duration
	// Heartbeat is how often the holder's watchdog extends its lease and
	// records in Redis that it lives. Each holder declares its own beat,
	// so pods with different settings agree: a holder whose last beat is
	// older than two of its beats is dead, and one waiter takes the lock
	// over. It is capped at a third of Lease.
	// default: 1 second (DefaultLockHeartbeat)
	Heartbeat time.Duration
	// Poll is the first interval of the waiters' safety-net poll; waiters
	// are woken by the holder's announcement, the poll only covers a lost
	// one. It grows by half each time, with jitter, up to 1 second.
	// default: 200 milliseconds
	Poll time.Duration
}

// RedisOptions configures the Redis stages. Zero fields take defaults.
type RedisOptions struct {
	// Prefix starts every key the pipeline writes.
	// default: "hg:"
	Prefix string
	// Codec encodes values.
	// default: cache.JSON
	Codec cache.Codec
	// OpTimeout bounds how long a call waits for each Redis operation,
	// dials and the client's retries included, with ContextTimeoutEnabled
	// set or not, so a slow or hung Redis cannot hold callers hostage. It
	// counts from when the operation's batch is sent: time queued behind
	// other operations of this pipeline, while Redis answers them, does
	// not count.
	// default: 200 milliseconds
	OpTimeout time.Duration
	// Breaker configures the pipeline's own breaker around Redis
	// operations. Only infrastructure failures count against it (no
	// reply, a broken connection, a server not ready); a per-key problem
	// (foreign data, a value the codec refuses) never does. Release and
	// extension of a held lock never go through it. Ignored when
	// SharedBreaker is set.
	// default: opens when half the operations of the last 10 seconds
	// failed (at least 20 of them), stays open 1 second, one probe.
	Breaker breaker.Settings
	// SharedBreaker, if not nil, is used instead of a breaker of the
	// pipeline's own, so that pipelines on one Redis learn together that
	// it is down. Every pipeline that uses it hears its transitions
	// (OnBreakerChange, metrics) until it is closed.
	// default: nil (a breaker per pipeline, from Breaker)
	SharedBreaker *breaker.Breaker
	// Encrypt, if not nil, seals every value the pipeline writes to Redis
	// with AES-GCM under the keyring's primary key, bound to its full
	// Redis key, and opens values sealed by any key of the keyring (see
	// [keyring.New] for rotation). A value that does not open (a key
	// the keyring lacks, altered or moved bytes, a value stored in clear)
	// is a miss, counted as herdguard.cache.corrupt with
	// herdguard.reason=decrypt_failed. The fence and expiry fields stay in clear.
	// default: nil (values stored in clear)
	Encrypt *keyring.Ring
}

// GetManyChunk is how many missed keys [Pipeline.GetMany] takes through
// Redis (or a backend) and its loader at a time: a call of more keys runs
// chunk after chunk, with one loader call each.
const GetManyChunk = 4096
