package rcache

import (
	"context"
	_ "embed"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/internal/rscript"
	"github.com/herdguard/herdguard/keyring"
)

var (
	// ErrExpiredEntry is returned by [Redis.Set] for an entry whose
	// StaleUntil (and Expires) has already passed: there is nothing left
	// to store.
	ErrExpiredEntry = errors.New("cache: entry already past its stale-until time")
	// ErrLockLost is returned by [Redis.Commit] when the writer's lock no
	// longer holds its token: backend.ErrLockLost, the error of every
	// store's fenced write.
	ErrLockLost = backend.ErrLockLost
	// ErrCodec is matched by the errors of a [Codec] that failed or
	// panicked on a value: a problem with that value, not with Redis.
	ErrCodec = errors.New("cache: codec failed")
)

// RedisClient is the part of a go-redis client that [Redis] uses. Both
// *redis.Client and *redis.ClusterClient (and redis.UniversalClient)
// satisfy it.
//
// The batch methods send their commands in one round trip ([Redis.GetMany])
// or in round trips of at most 4 batch scripts of up to 128 writes each
// ([Redis.SetMany]; on a Cluster, each script's keys share a hash slot),
// through the client's ProcessBatch(ctx, []redis.Cmder) error method when
// it has one (the pipeline's auto-pipelining client does), else through
// its Pipeline method, else one command at a time.
type RedisClient interface {
	redis.Scripter
	HGet(ctx context.Context, key, field string) *redis.StringCmd
	Del(ctx context.Context, keys ...string) *redis.IntCmd
}

// RedisOptions configures a [Redis]. Only Namespace is required.
type RedisOptions struct {
	// Prefix starts every key. It must not contain braces.
	// default: "hg:"
	Prefix string
	// Namespace separates one pipeline's keys from another's; it is
	// required and is usually the pipeline's name. It must not contain
	// braces.
	Namespace string
	// Codec encodes values.
	// default: [JSON]
	Codec Codec
	// OnCorrupt, if not nil, is called with the key and the decoding error
	// when [Redis.Get] finds bytes it cannot decode. It runs on the calling
	// goroutine, so it must be quick.
	// default: nil
	OnCorrupt func(key string, err error)
	// Encrypt, if not nil, seals every entry with the keyring's primary key
	// before it leaves the process, bound to its full Redis key; see
	// package keyring. An entry that does not open (another key, altered bytes,
	// bytes moved from another key, stored without encryption) is a miss,
	// reported to OnCorrupt with an error matching keyring.ErrDecrypt.
	// default: nil (entries stored in clear)
	Encrypt *keyring.Ring
	// Cluster says that client is a Redis Cluster client behind a
	// wrapper, such as the pipeline's batching client: a batch script of
	// [Redis.SetMany] then carries only keys of one hash slot, as Redis
	// Cluster requires. A *redis.ClusterClient is found without it.
	// default: false
	Cluster bool
}

// setScript writes an entry with fencing, setManyScript the entries of a
// batch (at most [rscript.MaxKeys] per run); see set.lua, which both
// share.
var (
	//go:embed set.lua
	setSource string
	//go:embed set_one.lua
	setOneSource string
	//go:embed set_many.lua
	setManySource string

	setScript     = redis.NewScript(setSource + setOneSource)
	setManyScript = redis.NewScript(setSource + setManySource)
)

// Redis is a shared store of [Entry] values in Redis, one hash per key
// holding the encoded entry and the fence it was written with.
//
// Keys are laid out so that one cache key's value, lock and fence counter
// share a Redis Cluster hash slot (see package lock). Redis is safe for
// concurrent use.
type Redis[V any] struct {
	client  RedisClient
	keys    rkey.Space
	channel any  // the announcement channel, boxed once for set.lua
	cluster bool // a batch script's keys must share a hash slot
	Coder[V]
}

// NewRedis returns a store that keeps its entries in Redis through client.
// It fails when client is nil or o.Namespace is empty.
func NewRedis[V any](client RedisClient, o RedisOptions) (*Redis[V], error) {
	if client == nil {
		return nil, errors.New("cache: redis client is nil")
	}
	keys, err := rkey.New(o.Prefix, o.Namespace)
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	if o.Encrypt != nil && len(o.Encrypt.IDs()) == 0 {
		return nil, errors.New("cache: Encrypt: the keyring holds no keys; build it with keyring.New")
	}
	_, cluster := client.(*redis.ClusterClient)
	r := &Redis[V]{client: client, keys: keys, channel: keys.Channel(), cluster: o.Cluster || cluster}
	r.Init(o.Codec, o.Encrypt, keys.Value, o.OnCorrupt)
	return r, nil
}

// Get returns the entry for key and how fresh it is, in one round trip. A
// missing key, and bytes that do not decode, are a [Miss] with a nil error;
// the latter are counted by [Coder.Corrupted] and reported to OnCorrupt. A
// Redis failure is returned as an error wrapping go-redis's.
func (r *Redis[V]) Get(ctx context.Context, key string) (Entry[V], Freshness, error) {
	raw, err := r.client.HGet(ctx, r.keys.Value(key), rkey.FieldData).Bytes()
	switch {
	case err == nil:
	case errors.Is(err, redis.Nil):
		return Entry[V]{}, Miss, nil
	case redis.HasErrorPrefix(err, "WRONGTYPE"):
		// Something else wrote a non-hash at our key.
		r.corrupt(key, fmt.Errorf("%w: value key holds the wrong type", errEnvelope))
		return Entry[V]{}, Miss, nil
	case err != nil:
		return Entry[V]{}, Miss, fmt.Errorf("cache: get: %w", err)
	}
	e, f := r.Decode(key, raw)
	return e, f, nil
}

// Decode turns the bytes stored for key (read by a script of the
// caller's, such as package lock's TryAcquireOrGet) into an entry and its
// freshness now, as [Redis.Get] would: nil (nothing stored) is a [Miss];
// bytes that do not decode are a Miss too, counted and reported to
// OnCorrupt.
func (r *Redis[V]) Decode(key string, raw []byte) (Entry[V], Freshness) {
	return r.DecodeAt(key, raw)
}

// Set stores e under key until e.StaleUntil, unless the stored entry was
// written under a newer lock grant: a write whose e.Fence is below the
// stored entry's fence is refused with stored == false and a nil error, so a
// superseded holder's late write-back cannot overwrite a newer value. An
// e.Fence of 0 means the entry was written without a lock; it replaces
// entries written without one, never one written under a lock (its load
// may have started before that grant's).
//
// Set returns [ErrExpiredEntry] if e.StaleUntil has passed, and an error
// matching [ErrCodec] if the value does not encode.
func (r *Redis[V]) Set(ctx context.Context, key string, e Entry[V]) (stored bool, err error) {
	return r.set(ctx, key, e, "", false)
}

// setHeld is [Redis.Set] for the holder of key's lock, without Commit's
// release and announcement.
func (r *Redis[V]) setHeld(ctx context.Context, key string, e Entry[V], token string) (stored bool, err error) {
	if token == "" {
		return false, errors.New("cache: set: empty lock token")
	}
	return r.set(ctx, key, e, token, false)
}

// Commit is [Redis.Set] for the holder of key's lock (a lock.Redis lease
// of the same prefix and namespace, with e.Fence its fence and token its
// token): in the same round trip it checks that the lock still holds
// token, and writes nothing, returning [ErrLockLost], when it does not (a
// holder whose lease was taken over, or lost when Redis lost its keys,
// therefore never writes back a value loaded before a newer one), then
// releases the lock and announces key on the namespace's channel (as
// package lock's notifier hears it): the holder's last step. The lock is released whether
// the write won or a newer entry refused it; on [ErrLockLost] nothing is
// written, released or announced. The holder's lease object must then be
// told it is released (lock's Lease.Forget) so that its watchdog stops.
func (r *Redis[V]) Commit(ctx context.Context, key string, e Entry[V], token string) (stored bool, err error) {
	if token == "" {
		return false, errors.New("cache: commit: empty lock token")
	}
	return r.set(ctx, key, e, token, true)
}

func (r *Redis[V]) set(ctx context.Context, key string, e Entry[V], token string, release bool) (stored bool, err error) {
	args, err := r.setArgs(key, e, token, release)
	if err != nil {
		return false, err
	}
	n, err := rscript.Run(ctx, r.client, setScript, []string{args[1].(string), args[2].(string)}, args[3:]...).Int()
	switch {
	case err != nil:
		return false, fmt.Errorf("cache: set: %w", err)
	case n < 0:
		return false, fmt.Errorf("cache: set: %w", ErrLockLost)
	}
	return n == 1, nil
}

// Delete removes key's entry. Deleting a missing key is not an error.
func (r *Redis[V]) Delete(ctx context.Context, key string) error {
	if err := r.client.Del(ctx, r.keys.Value(key)).Err(); err != nil {
		return fmt.Errorf("cache: delete: %w", err)
	}
	return nil
}
