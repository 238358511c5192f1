package lock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/internal/rlock"
)

// DefaultFenceRetention is how long a key's fence counter outlives the last
// grant or extension of its lock when RedisOptions.FenceRetention is 0.
const DefaultFenceRetention = rlock.DefaultFenceRetention

// RedisClient is the part of a go-redis client that [Redis] uses. Both
// *redis.Client and *redis.ClusterClient (and redis.UniversalClient)
// satisfy it.
//
// The pipeline's batches (its looks, beats and releases of many keys) run
// scripts of up to 128 keys each, at most 4 of them per round trip (on a
// Cluster, each script's keys share a hash slot; see
// [RedisOptions.Cluster]), and send their round trips: through the
// client's ProcessBatch(ctx, []redis.Cmder) error method when it has one
// (the pipeline's auto-pipelining client does), else through its Pipeline
// method, else one command at a time.
type RedisClient interface {
	redis.Scripter
	PTTL(ctx context.Context, key string) *redis.DurationCmd
}

// RedisOptions configures a [Redis] or a [RedisNotifier]. Only Namespace is
// required.
type RedisOptions struct {
	// Prefix starts every key and channel. It must not contain braces, and
	// must match the prefix of the cache whose keys are locked.
	// default: "hg:"
	Prefix string
	// Namespace separates one pipeline's locks from another's; it is
	// required and is usually the pipeline's name. It must not contain
	// braces.
	Namespace string
	// FenceRetention is how long a key's fence counter lives after the
	// last grant or extension of its lock. The counter must outlive any
	// superseded holder that may still write back; a value stored with a
	// fence keeps later grants above that fence even after the counter
	// expires. Ignored by [RedisNotifier].
	// default: 24 hours ([DefaultFenceRetention])
	FenceRetention time.Duration
	// Heartbeat is how often a holder's watchdog ([backend.Lease.KeepAlive])
	// extends its lease and records a beat in Redis. Each grant declares
	// twice this period in Redis as the time after its last beat when it
	// counts as dead; a TryAcquire that finds the beat older than that
	// takes the lock over with a new grant. Processes with different
	// settings agree, since each holder declares its own. Ignored by
	// [RedisNotifier].
	// default: 1 second ([backend.DefaultHeartbeat])
	Heartbeat time.Duration
	// Announce makes [backend.Lease.Release] also publish the key on the
	// namespace's channel, in the same round trip, so that the waiters of
	// a [RedisNotifier] of the same namespace wake. Ignored by
	// [RedisNotifier].
	// default: false
	Announce bool
	// Cluster says that client is a Redis Cluster client behind a
	// wrapper, such as the pipeline's batching client: a batch script
	// then carries only keys of one hash slot, as Redis Cluster requires
	// (on a Cluster, nearly every key of a batch has a slot of its own, so
	// its scripts run about one key each). A *redis.ClusterClient is
	// found without it. Ignored by [RedisNotifier].
	// default: false
	Cluster bool
}

// Redis is a [Locker] whose locks live in Redis, so that processes sharing
// the Redis coordinate. A lock is a hash holding the holder's random token,
// its fence and its last heartbeat, with the lease as its expiry; a fence
// counter lives next to it (same Redis Cluster hash slot).
//
// A holder that stops beating (crashed, cut off from Redis) is taken over
// by exactly one TryAcquire, about two heartbeats after its last beat,
// rather than at the end of its lease. Fences come from the Redis server's
// clock as well as the counter, so they keep growing when Redis loses the
// counter (a restart without persistence, FLUSHALL, eviction, a failover
// to a replica that had not received it), as long as the Redis hosts'
// clocks do not step back by more than the outage.
//
// Scripts run with EVALSHA, falling back to EVAL once when Redis does not
// know them (after a restart), so each operation is one round trip in the
// steady state. Redis is safe for concurrent use.
type Redis struct{ r *rlock.Redis }

var _ Locker = (*Redis)(nil)

// NewRedis returns a [Locker] that keeps its locks in Redis through client.
// It fails when client is nil or o.Namespace is empty.
func NewRedis(client RedisClient, o RedisOptions) (*Redis, error) {
	r, err := rlock.NewRedis(client, rlock.RedisOptions(o))
	if err != nil {
		return nil, err
	}
	return &Redis{r: r}, nil
}

// TryAcquire implements [Locker] in one round trip. It returns
// [backend.ErrNotAcquired] when a live holder has key, a [*backend.BackendError] when
// Redis fails, and an error matching ctx's when ctx ends first. A holder
// whose last beat is older than it declared is dead: TryAcquire takes the
// lock over ([backend.Lease.TookOver] reports it). So does a lock key holding
// data this package did not write, such as a lock hash without an expiry:
// whatever dead-after a holder declares, the lease it set at its last
// beat (the key's expiry) ends its hold.
//
// The lease's watchdog beats every [RedisOptions.Heartbeat], or every
// third of the lease if that is shorter.
//
// When the outcome is unknown (ctx ended or the connection broke while the
// script was in flight), TryAcquire deletes the lock by its token, so that
// no lock is orphaned. That delete runs on a goroutine of its own, past
// ctx's end, for up to a second, so that a caller facing a dead Redis is
// not held for it; if Redis cannot be reached for it, a lock that was set
// never beats, and the next TryAcquire takes it over two heartbeats later.
func (r *Redis) TryAcquire(ctx context.Context, key string, lease time.Duration) (*backend.Lease, error) {
	return r.r.TryAcquire(ctx, key, lease)
}

// Inspect implements [Locker]. A lock without an expiry (set by hand)
// reports held with 0 remaining.
func (r *Redis) Inspect(ctx context.Context, key string) (held bool, remaining time.Duration, err error) {
	return r.r.Inspect(ctx, key)
}

// Wait waits for the deletes that follow acquires whose outcome was
// unknown (see [Redis.TryAcquire]), each bounded by a few seconds. The owner of
// a Redis calls it when done with it, so that nothing it started outlives
// it; the Redis stays usable.
func (r *Redis) Wait() { r.r.Wait() }
