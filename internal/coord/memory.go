package coord

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/internal/rlock"
)

// memoryCoord is the coordination seam of the embedded default: one
// process, a [lock.Memory] and its notifier, and L1 as the store that
// waiters look at (l1, which Read reads). It has no shared store to
// commit to.
type memoryCoord[V any] struct {
	d  Deps[V]
	n  *rlock.MemoryNotifier
	l1 *rcache.Memory[V]
}

var _ Coord[int] = (*memoryCoord[int])(nil)

// NewMemory is the seam of the embedded default, over d.Locker (a
// [lock.Memory]), n, its notifier, and l1, where the values that waiters
// look at land.
func NewMemory[V any](d Deps[V], n *rlock.MemoryNotifier, l1 *rcache.Memory[V]) Coord[V] {
	return &memoryCoord[V]{d: d, n: n, l1: l1}
}

// errNoStore is the embedded default's answer to a commit, which the
// stages never ask of it: it has no L2.
var errNoStore = errors.New("resilience: the embedded default has no shared store")

// Read looks key up in L1; it never fails.
func (c *memoryCoord[V]) Read(_ context.Context, key string) (rcache.Entry[V], cache.Freshness, error) {
	e, f := c.l1.Lookup(key)
	if e == nil {
		return rcache.Entry[V]{}, f, nil
	}
	return *e, f, nil
}

// ReadMany is Read for each key.
func (c *memoryCoord[V]) ReadMany(ctx context.Context, keys []string) ([]Look[V], error) {
	looks := make([]Look[V], len(keys))
	for i, k := range keys {
		looks[i].E, looks[i].F, _ = c.Read(ctx, k)
	}
	return looks, nil
}

func (c *memoryCoord[V]) LookOrLock(ctx context.Context, key string, _ bool, w Want) (Look[V], error) {
	// The lease outlives the look's caller: the detached load holds
	// it, and releases it.
	return c.d.lookThenLock(ctx, context.WithoutCancel(ctx), c, key, w)
}

func (c *memoryCoord[V]) LookOrLockMany(ctx context.Context, keys []string) ([]Look[V], error) {
	return c.d.lookThenLockMany(ctx, c, keys), nil
}

func (c *memoryCoord[V]) Commit(context.Context, string, rcache.Entry[V], string) (bool, error) {
	return false, errNoStore
}

func (c *memoryCoord[V]) CommitMany(context.Context, []rcache.Write[V]) ([]rcache.Written, error) {
	return nil, errNoStore
}

func (c *memoryCoord[V]) ExtendMany(ctx context.Context, leases []*backend.Lease) ([]bool, error) {
	return extendEach(ctx, leases)
}

func (c *memoryCoord[V]) Release(ctx context.Context, key string, lease *backend.Lease) {
	notifyRelease(ctx, c.n, key, lease)
}

func (c *memoryCoord[V]) ReleaseMany(ctx context.Context, leases []*backend.Lease) {
	for _, l := range leases {
		notifyRelease(ctx, c.n, l.Key(), l)
	}
}

func (c *memoryCoord[V]) Mark() uint64 { return c.n.Mark() }

func (c *memoryCoord[V]) Subscribe(key string, mark uint64) (<-chan struct{}, func(), bool) {
	return subscribeSince(c.n, key, mark)
}

func (c *memoryCoord[V]) Subscribed() bool { return false }

func (c *memoryCoord[V]) Check(context.Context) *Finding { return nil }

func (c *memoryCoord[V]) L2Attrs(string, string, ...attribute.KeyValue) []attribute.KeyValue {
	return nil
}

func (c *memoryCoord[V]) FailReason() string { return "lock_error" }
