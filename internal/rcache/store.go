package rcache

import "context"

// Store is the shared cache (L2) as the pipeline uses it: a [*Redis], or
// a backend's store (package remote's Announced). The Redis fast paths
// (the look that also tries the lock, the batched looks and releases)
// go to the Redis lock itself, in internal/coord's Redis adapter, which
// reads what it returns with Decode.
type Store[V any] interface {
	Get(ctx context.Context, key string) (Entry[V], Freshness, error)
	Decode(key string, raw []byte) (Entry[V], Freshness)
	Set(ctx context.Context, key string, e Entry[V]) (bool, error)
	// Commit writes under the lock's token, releases the lock and wakes
	// its waiters, in one step.
	Commit(ctx context.Context, key string, e Entry[V], token string) (bool, error)
	GetMany(ctx context.Context, keys []string) ([]Got[V], error)
	SetMany(ctx context.Context, writes []Write[V]) ([]Written, error)
	// Write and Invalidate are Set's and Invalidate's: fenced above every
	// grant and write so far, and announced with o.Origin.
	Write(ctx context.Context, key string, e Entry[V], o WriteOptions) (int64, error)
	Invalidate(ctx context.Context, key string, o WriteOptions) (int64, error)
	// Corrupted counts the reads that found bytes that did not decode.
	Corrupted() uint64
}

var _ Store[int] = (*Redis[int])(nil)
