package cache

import (
	"context"
	"crypto/rand"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/keyring"
	"github.com/herdguard/herdguard/lock"
)

var (
	// ErrExpiredEntry is returned by [Redis.Set] for an entry whose
	// StaleUntil (and Expires) has already passed: there is nothing left
	// to store.
	ErrExpiredEntry = rcache.ErrExpiredEntry
	// ErrCodec is matched by the errors of a [Codec] that failed or
	// panicked on a value: a problem with that value, not with Redis.
	ErrCodec = rcache.ErrCodec
)

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
	// before it leaves the process, bound to its full Redis key (see
	// package keyring). An entry that does not open (another key, altered
	// bytes, bytes moved from another key, stored without encryption) is a
	// miss, reported to OnCorrupt with an error matching
	// keyring.ErrDecrypt.
	// default: nil (entries stored in clear)
	Encrypt *keyring.Ring
}

// Redis is a shared store of [Entry] values in Redis, one hash per key
// holding the encoded entry and the fence it was written with: the store a
// pipeline of package resilience keeps its shared entries in, with the same
// key layout, so that a Redis and a pipeline of the same prefix and
// namespace read and write the same entries. Redis is safe for concurrent
// use.
type Redis[V any] struct {
	r *rcache.Redis[V]
}

// NewRedis returns a store that keeps its entries in Redis through client
// (a *redis.Client or a *redis.ClusterClient). It fails when client is nil,
// o.Namespace is empty, or o.Encrypt holds no keys.
func NewRedis[V any](client redis.UniversalClient, o RedisOptions) (*Redis[V], error) {
	var c rcache.RedisClient
	if client != nil {
		c = client
	}
	r, err := rcache.NewRedis[V](c, rcache.RedisOptions{
		Prefix: o.Prefix, Namespace: o.Namespace, Codec: o.Codec, OnCorrupt: o.OnCorrupt, Encrypt: o.Encrypt,
	})
	if err != nil {
		return nil, err
	}
	return &Redis[V]{r: r}, nil
}

// Get returns the entry for key and how fresh it is, in one round trip. A
// missing key, and bytes that do not decode, are a [Miss] with a nil error;
// the latter are reported to OnCorrupt. A Redis failure is returned as an
// error wrapping go-redis's.
func (r *Redis[V]) Get(ctx context.Context, key string) (Entry[V], Freshness, error) {
	e, f, err := r.r.Get(ctx, key)
	return outer(e), f, err
}

// Set stores e under key until e.StaleUntil, as a write without a lock: it
// replaces entries written without one, never one that a pipeline wrote
// under a lock grant (its load may have started before that grant's): that
// write is refused with stored == false and a nil error.
//
// Set returns [ErrExpiredEntry] if e.StaleUntil has passed, and an error
// matching [ErrCodec] if the value does not encode.
func (r *Redis[V]) Set(ctx context.Context, key string, e Entry[V]) (stored bool, err error) {
	return r.r.Set(ctx, key, e.inner())
}

// Delete removes key's entry. Deleting a missing key is not an error.
func (r *Redis[V]) Delete(ctx context.Context, key string) error {
	return r.r.Delete(ctx, key)
}

// Invalidate replaces key's entry with a tombstone, a fence above every
// lock grant and write so far that readers see as a miss, for hold;
// revokes key's lock, so that a pipeline still loading key writes nothing
// back; and announces it on the namespace's channel, so that every
// pipeline of the namespace drops its in-process copy; in one round trip.
// A load that starts after Invalidate writes normally. It returns the
// tombstone's fence.
//
// hold must be positive: as long as a load that started before the
// invalidation may still try to write back without a lock.
func (r *Redis[V]) Invalidate(ctx context.Context, key string, hold time.Duration) (fence int64, err error) {
	// A random origin: no pipeline takes the announcement for its own
	// write and keeps its copy.
	origin := make([]byte, rkey.OriginLen)
	_, _ = rand.Read(origin)
	return r.r.Invalidate(ctx, key, rcache.WriteOptions{
		Origin: string(origin), FenceRetention: lock.DefaultFenceRetention, Hold: hold,
	})
}
