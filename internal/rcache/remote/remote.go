// Package remote is the pipeline's shared (L2) store over a backend other
// than Redis: [Remote], rcache's encoding, envelope and sealing over a
// backend.Store's fenced writes, and [Announced], a Remote whose writes
// and invalidations the backend announces, as the pipeline's L2.
package remote

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/keyring"
)

// Options configures a [Remote]. Only Namespace is required.
type Options struct {
	// Namespace is the name of the values' namespace in the store
	// (usually the pipeline's name): with Encrypt, each value is sealed
	// under its namespace and key, so that bytes copied to another key
	// or namespace do not open.
	Namespace string
	// Codec encodes values.
	// default: [rcache.JSON]
	Codec rcache.Codec
	// OnCorrupt, if not nil, is called with the key and the decoding error
	// when [Remote.Get] finds bytes it cannot decode, as rcache.RedisOptions'
	// is.
	// default: nil
	OnCorrupt func(key string, err error)
	// Encrypt, if not nil, seals every entry with the keyring's primary
	// key, as rcache.RedisOptions' does; the store keeps the fence in clear
	// beside it.
	// default: nil (entries stored in clear)
	Encrypt *keyring.Ring
}

// Remote is a shared store of [rcache.Entry] values over a [backend.Store] (a backend
// other than Redis): rcache.Redis's encoding, envelope and sealing, with the
// store's fenced writes. Its methods mirror rcache.Redis's. Remote is safe for
// concurrent use.
type Remote[V any] struct {
	store backend.Store
	rcache.Coder[V]
}

// New returns a store of entries kept in s. It fails when s is nil,
// o.Namespace is empty, or o.Encrypt holds no keys.
func New[V any](s backend.Store, o Options) (*Remote[V], error) {
	switch {
	case s == nil:
		return nil, errors.New("cache: store is nil")
	case o.Namespace == "":
		return nil, errors.New("cache: namespace is empty")
	case o.Encrypt != nil && len(o.Encrypt.IDs()) == 0:
		return nil, errors.New("cache: Encrypt: the keyring holds no keys; build it with keyring.New")
	}
	// The sealing name prefixes the namespace with its length, so that no
	// namespace and key run into another pair.
	prefix := strconv.Itoa(len(o.Namespace)) + ":" + o.Namespace + ":"
	r := &Remote[V]{store: s}
	r.Init(o.Codec, o.Encrypt, func(key string) string { return prefix + key }, o.OnCorrupt)
	return r, nil
}

// Get returns the entry for key and how fresh it is. A missing key, and
// bytes that do not decode, are a [rcache.Miss] with a nil error; the latter are
// counted by [rcache.Coder.Corrupted] and reported to OnCorrupt. A store failure
// is returned as an error wrapping the store's.
func (r *Remote[V]) Get(ctx context.Context, key string) (rcache.Entry[V], rcache.Freshness, error) {
	raw, err := r.store.Load(ctx, key)
	switch {
	case err != nil:
		return rcache.Entry[V]{}, rcache.Miss, fmt.Errorf("cache: get: %w", err)
	case raw == nil:
		return rcache.Entry[V]{}, rcache.Miss, nil
	}
	e, f := r.DecodeAt(key, raw)
	return e, f, nil
}

// Decode turns the bytes stored for key into an entry and its freshness
// now, as [Remote.Get] would.
func (r *Remote[V]) Decode(key string, raw []byte) (rcache.Entry[V], rcache.Freshness) {
	return r.DecodeAt(key, raw)
}

// Set stores e under key until e.StaleUntil under the fence rule of
// rcache.Redis.Set: refused (stored false, nil error) below the stored entry's
// fence, and with e.Fence 0 over any fenced entry.
func (r *Remote[V]) Set(ctx context.Context, key string, e rcache.Entry[V]) (stored bool, err error) {
	return r.set(ctx, key, e, "", false)
}

// SetHeld is [Remote.Set] for the holder of key's lock under token (a
// lease of the store's backend, with e.Fence its fence): it writes
// nothing, and returns an error matching [backend.ErrLockLost], when the lock no
// longer holds token.
func (r *Remote[V]) SetHeld(ctx context.Context, key string, e rcache.Entry[V], token string) (stored bool, err error) {
	if token == "" {
		return false, errors.New("cache: set: empty lock token")
	}
	return r.set(ctx, key, e, token, false)
}

// Commit is [Remote.SetHeld] that also releases the lock and wakes key's
// waiters in the same step, as rcache.Redis.Commit does: the holder's last
// step. The lease object must then be told (lock's Lease.Forget).
func (r *Remote[V]) Commit(ctx context.Context, key string, e rcache.Entry[V], token string) (stored bool, err error) {
	if token == "" {
		return false, errors.New("cache: commit: empty lock token")
	}
	return r.set(ctx, key, e, token, true)
}

func (r *Remote[V]) set(ctx context.Context, key string, e rcache.Entry[V], token string, release bool) (bool, error) {
	if e.Fence < 0 {
		return false, fmt.Errorf("cache: set: negative fence %d", e.Fence)
	}
	raw, until, _, err := r.Encode("set", key, e, e.Fence)
	if err != nil {
		return false, err
	}
	stored, err := r.store.Save(ctx, key, raw, backend.Save{Fence: e.Fence, Token: token, Release: release, Until: until})
	if err != nil {
		return false, fmt.Errorf("cache: set: %w", err)
	}
	return stored, nil
}

// GetMany is [Remote.Get] for many keys, one after the other: the i-th
// answer is keys[i]'s. err is the first store failure, which ends the
// batch.
func (r *Remote[V]) GetMany(ctx context.Context, keys []string) ([]rcache.Got[V], error) {
	out := make([]rcache.Got[V], len(keys))
	for i, k := range keys {
		e, f, err := r.Get(ctx, k)
		if err != nil {
			return out, err
		}
		out[i] = rcache.Got[V]{Entry: e, Freshness: f}
	}
	return out, nil
}

// SetMany runs writes one after the other (a write with Release commits,
// as [Remote.Commit] does): the i-th outcome is writes[i]'s. Every write
// is tried; err is always nil, the failures being per write.
func (r *Remote[V]) SetMany(ctx context.Context, writes []rcache.Write[V]) ([]rcache.Written, error) {
	out := make([]rcache.Written, len(writes))
	for i, w := range writes {
		if w.Release && w.Token == "" {
			out[i].Err = errors.New("cache: commit: empty lock token")
			continue
		}
		out[i].Stored, out[i].Err = r.set(ctx, w.Key, w.Entry, w.Token, w.Release)
	}
	return out, nil
}

// Write stores e under key with a fence above every lock grant and write
// of key so far ([backend.Store.NextFence]), so that neither a holder that loaded
// before it nor an unlocked load overwrites it, and returns that fence.
// e.Fence is ignored. The lock is left to its holder. Unlike rcache.Redis.Write
// it announces nothing: [Announced.Write] does.
func (r *Remote[V]) Write(ctx context.Context, key string, e rcache.Entry[V]) (fence int64, err error) {
	if _, _, _, err := r.Encode("write", key, e, 0); err != nil {
		return 0, err // before a fence is spent
	}
	if fence, err = r.store.NextFence(ctx, key, false); err != nil {
		return 0, fmt.Errorf("cache: write: %w", err)
	}
	raw, until, _, err := r.Encode("write", key, e, fence)
	if err != nil {
		return 0, err
	}
	if _, err := r.store.Save(ctx, key, raw, backend.Save{Fence: fence, Until: until}); err != nil {
		return 0, fmt.Errorf("cache: write: %w", err)
	}
	return fence, nil
}

// Invalidate replaces key's entry with a tombstone, a fence above every
// lock grant and write so far that readers see as a miss, for hold, and
// revokes key's lock so that a holder still loading writes nothing back
// ([backend.Store.NextFence] with revoke). It returns the tombstone's fence.
// Unlike rcache.Redis.Invalidate it announces nothing:
// [Announced.Invalidate] does.
func (r *Remote[V]) Invalidate(ctx context.Context, key string, hold time.Duration) (fence int64, err error) {
	if hold <= 0 {
		return 0, errors.New("cache: invalidate: hold must be positive")
	}
	if fence, err = r.store.NextFence(ctx, key, true); err != nil {
		return 0, fmt.Errorf("cache: invalidate: %w", err)
	}
	// An envelope with no expiry and no stale-until: a miss to every
	// reader, kept by the store for hold.
	now := time.Now()
	raw := r.Tombstone(key, now, fence)
	if _, err := r.store.Save(ctx, key, raw, backend.Save{Fence: fence, Until: now.Add(hold)}); err != nil {
		return 0, fmt.Errorf("cache: invalidate: %w", err)
	}
	return fence, nil
}
