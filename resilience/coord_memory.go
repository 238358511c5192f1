package resilience

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
// waiters look at. It has no shared store to commit to.
type memoryCoord[V any] struct {
	p *Pipeline[V]
	n *rlock.MemoryNotifier
}

var _ coord[int] = (*memoryCoord[int])(nil)

// errNoStore is the embedded default's answer to a commit, which the
// stages never ask of it: it has no L2.
var errNoStore = errors.New("resilience: the embedded default has no shared store")

func (c *memoryCoord[V]) read(_ context.Context, key string) (rcache.Entry[V], cache.Freshness, error) {
	e, f := c.p.l1.Lookup(key)
	if e == nil {
		return rcache.Entry[V]{}, f, nil
	}
	return *e, f, nil
}

func (c *memoryCoord[V]) lookOrLock(ctx context.Context, key string, _ bool, w want) (look[V], error) {
	// The lease outlives the look's caller: the detached load holds
	// it, and releases it.
	return c.p.lookThenLock(ctx, context.WithoutCancel(ctx), key, w, c.read)
}

func (c *memoryCoord[V]) lookOrLockMany(ctx context.Context, keys []string) ([]look[V], error) {
	return c.p.lookThenLockMany(ctx, keys, c.read), nil
}

func (c *memoryCoord[V]) commit(context.Context, string, rcache.Entry[V], string) (bool, error) {
	return false, errNoStore
}

func (c *memoryCoord[V]) commitMany(context.Context, []rcache.Write[V]) ([]rcache.Written, error) {
	return nil, errNoStore
}

func (c *memoryCoord[V]) extendMany(ctx context.Context, leases []*backend.Lease) ([]bool, error) {
	return extendEach(ctx, leases)
}

func (c *memoryCoord[V]) release(ctx context.Context, key string, lease *backend.Lease) {
	notifyRelease(ctx, c.n, key, lease)
}

func (c *memoryCoord[V]) releaseMany(ctx context.Context, leases []*backend.Lease) {
	for _, l := range leases {
		notifyRelease(ctx, c.n, l.Key(), l)
	}
}

func (c *memoryCoord[V]) mark() uint64 { return c.n.Mark() }

func (c *memoryCoord[V]) subscribe(key string, mark uint64) (<-chan struct{}, func(), bool) {
	return subscribeSince(c.n, key, mark)
}

func (c *memoryCoord[V]) subscribed() bool { return false }

func (c *memoryCoord[V]) check(context.Context) error { return nil }

func (c *memoryCoord[V]) l2Attrs(string, string, ...attribute.KeyValue) []attribute.KeyValue {
	return nil
}

func (c *memoryCoord[V]) failReason() string { return "lock_error" }
