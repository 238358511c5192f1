package rlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/internal/rscript"
)

// DefaultFenceRetention is how long a key's fence counter outlives the last
// grant or extension of its lock when RedisOptions.FenceRetention is 0.
const DefaultFenceRetention = 24 * time.Hour

// cleanupTimeout bounds the token-checked delete that follows an acquire
// whose outcome is unknown: ample for a healthy Redis, and the most a hung
// one can add to a caller who has already given up.
const cleanupTimeout = time.Second

// settleWait bounds how long that delete waits for the acquire it follows
// to be done with (see afterSettled).
const settleWait = 5 * time.Second

// afterSettled waits, up to settleWait, until the command that failed
// with err can no longer reach Redis, when err says so: a client that
// sends commands in batches of its own (the pipeline's) returns such an
// error for a command whose caller stopped waiting while it was queued or
// in flight. A delete sent at once could otherwise reach Redis before the
// acquire it is to undo, and leave that lock behind.
func afterSettled(err error) {
	var p interface{ Settled() <-chan struct{} }
	if !errors.As(err, &p) {
		return
	}
	t := time.NewTimer(settleWait)
	defer t.Stop()
	select {
	case <-p.Settled():
	case <-t.C:
	}
}

// RedisClient is the part of a go-redis client that [Redis] uses. Both
// *redis.Client and *redis.ClusterClient (and redis.UniversalClient)
// satisfy it.
//
// The batch methods ([Redis.TryAcquireOrGetMany], [Redis.ExtendMany],
// [Redis.ReleaseMany]) run batch scripts of up to 128 keys each, at most
// 4 of them per round trip (on a Cluster, each script's keys share a
// hash slot; see [RedisOptions.Cluster]), and send their round trips:
// through the client's ProcessBatch(ctx, []redis.Cmder) error method when
// it has one (the pipeline's auto-pipelining client does), else through
// its Pipeline method, else one command at a time.
type RedisClient interface {
	redis.Scripter
	PTTL(ctx context.Context, key string) *redis.DurationCmd
}

// RedisOptions configures a [Redis] or a [RedisNotifier]. Only Namespace is
// required. Package lock's RedisOptions has the same fields, in the same
// order, and converts to it.
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

// Each script comes in two forms sharing one Lua body: for one key, and
// for the keys of a batch (at most [rscript.MaxKeys] per run).
var (
	//go:embed acquire.lua
	acquireSource string
	//go:embed acquire_one.lua
	acquireOneSource string
	//go:embed acquire_many.lua
	acquireManySource string
	//go:embed release.lua
	releaseSource string
	//go:embed release_one.lua
	releaseOneSource string
	//go:embed release_many.lua
	releaseManySource string
	//go:embed extend.lua
	extendSource string
	//go:embed extend_one.lua
	extendOneSource string
	//go:embed extend_many.lua
	extendManySource string

	acquireScript     = redis.NewScript(rkey.FenceLua + acquireSource + acquireOneSource)
	acquireManyScript = redis.NewScript(rkey.FenceLua + acquireSource + acquireManySource)
	releaseScript     = redis.NewScript(releaseSource + releaseOneSource)
	releaseManyScript = redis.NewScript(releaseSource + releaseManySource)
	extendScript      = redis.NewScript(extendSource + extendOneSource)
	extendManyScript  = redis.NewScript(extendSource + extendManySource)
)

// Redis is a lock.Locker whose locks live in Redis, so that processes sharing
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
type Redis struct {
	cleanups sync.WaitGroup // background deletes after unknown outcomes

	client    RedisClient
	keys      rkey.Space
	retention time.Duration
	heartbeat time.Duration
	channel   string // announcement channel on release; empty for none
	cluster   bool   // a batch script's keys must share a hash slot

	// timing is the acquire script's timing arguments for the lease last
	// asked for, kept boxed: a pipeline asks for the same lease every time.
	timing atomic.Pointer[acquireTiming]
	// holder releases and extends the leases this locker grants.
	holder *Holder
}

// acquireTiming is the acquire script's arguments that follow from a
// lease: its length, the fence counter's life and the dead-after, in
// milliseconds, with the heartbeat period.
type acquireTiming struct {
	lease               time.Duration
	ms, keep, deadAfter any
	beat                time.Duration
}

// timingOf returns the timing arguments of lease.
func (r *Redis) timingOf(lease time.Duration) *acquireTiming {
	if t := r.timing.Load(); t != nil && t.lease == lease {
		return t
	}
	beat := min(r.heartbeat, lease/3)
	t := &acquireTiming{lease: lease, beat: beat, ms: rkey.Millis(lease),
		keep: rkey.Millis(lease + r.retention), deadAfter: rkey.Millis(2 * beat)}
	r.timing.Store(t)
	return t
}

// NewRedis returns a lock.Locker that keeps its locks in Redis through client.
// It fails when client is nil or o.Namespace is empty.
func NewRedis(client RedisClient, o RedisOptions) (*Redis, error) {
	if client == nil {
		return nil, errors.New("lock: redis client is nil")
	}
	keys, err := rkey.New(o.Prefix, o.Namespace)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	if o.FenceRetention < 0 || o.Heartbeat < 0 {
		return nil, errors.New("lock: FenceRetention and Heartbeat must not be negative")
	}
	r := &Redis{client: client, keys: keys, retention: o.FenceRetention, heartbeat: o.Heartbeat}
	r.holder = &Holder{Rel: r.release, Ext: r.extend}
	if r.retention == 0 {
		r.retention = DefaultFenceRetention
	}
	if r.heartbeat == 0 {
		r.heartbeat = backend.DefaultHeartbeat
	}
	if o.Announce {
		r.channel = keys.Channel()
	}
	_, cluster := client.(*redis.ClusterClient)
	r.cluster = o.Cluster || cluster
	return r, nil
}

// TryAcquire implements lock.Locker in one round trip. It returns
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
	if err := CheckArgs(key, lease); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lock: acquire: %w", err)
	}
	l, _, err := r.acquire(ctx, key, lease, 0)
	return l, err
}

// TryAcquireOrGet is [Redis.TryAcquire] that also reads key's cached value
// (as package cache stores it) in the same round trip: a waiter's or a
// would-be holder's single look. When the value is fresh at now, it
// returns its bytes and no lease, with fresh set, and leaves the lock
// alone. Otherwise it tries the lock as TryAcquire does and returns the
// stored bytes, stale or expired, alongside (nil when there are none), for
// a caller that serves stale copies.
func (r *Redis) TryAcquireOrGet(ctx context.Context, key string, lease time.Duration, now time.Time) (l *backend.Lease, value []byte, fresh bool, err error) {
	if err := CheckArgs(key, lease); err != nil {
		return nil, nil, false, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, false, fmt.Errorf("lock: acquire: %w", err)
	}
	ms := max(now.UnixMilli(), 1)
	l, reply, err := r.acquire(ctx, key, lease, ms)
	if len(reply) > 2 {
		if s, ok := reply[2].(string); ok {
			value = []byte(s)
		}
	}
	if err == nil && l == nil { // {-1, 0, bytes}: fresh
		return nil, value, true, nil
	}
	return l, value, false, err
}

// acquire runs acquire.lua; now is the caller's clock in Unix
// milliseconds, or 0 to leave the value alone. It returns a nil lease and
// a nil error for a fresh value.
func (r *Redis) acquire(ctx context.Context, key string, lease time.Duration, now int64) (*backend.Lease, []any, error) {
	tok := NewToken()
	t := r.timingOf(lease)
	beat := t.beat
	reply, err := rscript.Run(ctx, r.client, acquireScript,
		[]string{r.keys.Lock(key), r.keys.Fence(key), r.keys.Value(key)},
		tok, t.ms, t.keep, rkey.FieldFence, t.deadAfter,
		now, rkey.FieldData, rkey.FieldExpires,
	).Slice()
	var fence, how int64
	if err == nil {
		if len(reply) < 2 {
			err = fmt.Errorf("acquire script returned %d values, want at least 2", len(reply))
		} else {
			fence, _ = reply[0].(int64)
			how, _ = reply[1].(int64)
		}
	}
	switch {
	case err == nil && fence > 0:
		l := NewLease(r.holder, key, tok, fence, lease, beat, how != 1)
		return l, reply, nil
	case err == nil && fence < 0:
		return nil, reply, nil
	case err == nil:
		return nil, reply, backend.ErrNotAcquired
	}
	if !isReply(err) {
		// The goroutine ends with the delete, which cleanupTimeout bounds;
		// Wait waits for it.
		r.cleanups.Add(1)
		go func() {
			defer r.cleanups.Done()
			afterSettled(err)
			r.cleanup(key, tok)
		}()
	}
	return nil, nil, failure(ctx, "acquire", key, err)
}

// Wait waits for the deletes that follow acquires whose outcome was
// unknown (see [Redis.TryAcquire]), each bounded by a few seconds. The owner of
// a Redis calls it when done with it, so that nothing it started outlives
// it; the Redis stays usable.
func (r *Redis) Wait() { r.cleanups.Wait() }

// cleanup deletes key's lock if tok holds it. It runs on a context of its
// own, not derived from ctx, because ctx may be the very reason the outcome
// is unknown, and the delete must still happen after the caller has given
// up; its own short deadline keeps a failing Redis from holding the caller
// long.
func (r *Redis) cleanup(key, tok string) {
	cctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_ = rscript.Run(cctx, r.client, releaseScript, []string{r.keys.Lock(key)}, tok, "", "").Err()
}

// Inspect implements lock.Locker. A lock without an expiry (set by hand)
// reports held with 0 remaining.
func (r *Redis) Inspect(ctx context.Context, key string) (held bool, remaining time.Duration, err error) {
	d, err := r.client.PTTL(ctx, r.keys.Lock(key)).Result()
	switch {
	case err != nil:
		return false, 0, failure(ctx, "inspect", key, err)
	case d == -2: // go-redis passes Redis's "no such key" through as -2ns
		return false, 0, nil
	case d < 0: // -1: no expiry
		return true, 0, nil
	default:
		return true, d, nil
	}
}

func (r *Redis) release(ctx context.Context, key, token string) error {
	n, err := rscript.Run(ctx, r.client, releaseScript, []string{r.keys.Lock(key)}, token, r.channel, key).Int64()
	if err != nil {
		return failure(ctx, "release", key, err)
	}
	if n == 0 {
		return backend.ErrNotHeld
	}
	return nil
}

func (r *Redis) extend(ctx context.Context, key, token string, lease time.Duration) error {
	n, err := rscript.Run(ctx, r.client, extendScript,
		[]string{r.keys.Lock(key), r.keys.Fence(key)},
		token, rkey.Millis(lease), rkey.Millis(lease+r.retention),
	).Int64()
	if err != nil {
		return failure(ctx, "extend", key, err)
	}
	if n == 0 {
		return backend.ErrNotHeld
	}
	return nil
}
