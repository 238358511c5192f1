package resilience

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/coord"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/internal/rcache/remote"
)

// l2Store is the shared cache (L2) as the pipeline uses it: a
// *rcache.Redis, or a backend's store (backendL2). The Redis fast paths
// (the look that also tries the lock, the batched looks and releases)
// go to the Redis lock itself, in internal/coord's Redis adapter, which
// reads what it returns with Decode.
type l2Store[V any] interface {
	Get(ctx context.Context, key string) (rcache.Entry[V], cache.Freshness, error)
	Decode(key string, raw []byte) (rcache.Entry[V], cache.Freshness)
	Set(ctx context.Context, key string, e rcache.Entry[V]) (bool, error)
	// Commit writes under the lock's token, releases the lock and wakes
	// its waiters, in one step.
	Commit(ctx context.Context, key string, e rcache.Entry[V], token string) (bool, error)
	GetMany(ctx context.Context, keys []string) ([]rcache.Got[V], error)
	SetMany(ctx context.Context, writes []rcache.Write[V]) ([]rcache.Written, error)
	// Write and Invalidate are Set's and Invalidate's: fenced above every
	// grant and write so far, and announced with o.Origin.
	Write(ctx context.Context, key string, e rcache.Entry[V], o rcache.WriteOptions) (int64, error)
	Invalidate(ctx context.Context, key string, o rcache.WriteOptions) (int64, error)
	// Corrupted counts the reads that found bytes that did not decode.
	Corrupted() uint64
}

var _ l2Store[int] = (*rcache.Redis[int])(nil)

// backendL2 is a backend's store as the pipeline's L2: remote.Remote, with
// Set's and Invalidate's announcements made through the backend.
type backendL2[V any] struct {
	*remote.Remote[V]
	shared backend.Shared
}

// Write stores e at a fence of its own, then announces it.
func (b backendL2[V]) Write(ctx context.Context, key string, e rcache.Entry[V], o rcache.WriteOptions) (int64, error) {
	f, err := b.Remote.Write(ctx, key, e)
	if err != nil {
		return 0, err
	}
	if err := b.shared.Announce(ctx, key, o.Origin); err != nil {
		return f, fmt.Errorf("resilience: announce a write: %w", err)
	}
	return f, nil
}

// Invalidate stores a tombstone that revokes key's lock, then announces
// it.
func (b backendL2[V]) Invalidate(ctx context.Context, key string, o rcache.WriteOptions) (int64, error) {
	f, err := b.Remote.Invalidate(ctx, key, o.Hold)
	if err != nil {
		return 0, err
	}
	if err := b.shared.Announce(ctx, key, o.Origin); err != nil {
		return f, fmt.Errorf("resilience: announce an invalidation: %w", err)
	}
	return f, nil
}

// wireBackend opens the pipeline's view of its Backend and makes it the
// L2, the notifier, and with Lock the lock, behind the guard (breaker and
// operation timeout) the Redis stages have; and it makes the backend's
// announcements keep L1 coherent, as watchWrites does with Redis's.
func (p *Pipeline[V]) wireBackend(c config[V]) error {
	o := c.backendOpts
	if o.OpTimeout == 0 {
		o.OpTimeout = DefaultBackendTimeout
	}
	br, err := p.infraBreaker(c, o.SharedBreaker, o.Breaker, "backend", "BackendOptions")
	if err != nil {
		return err
	}
	p.redisGuard = &coord.Guard{Breaker: br, OpTimeout: o.OpTimeout, Deadline: true}
	sh, err := c.backend.Open(backend.Scope{Namespace: c.name, Heartbeat: lockDefaults(c.lock).Heartbeat})
	if err != nil {
		return fmt.Errorf("resilience: pipeline %q: open the backend: %w", c.name, err)
	}
	if sh == nil {
		return &ConfigError{Pipeline: c.name, Field: "Backend", Problem: "Open returned no view and no error"}
	}
	rs, err := remote.New[V](sh, remote.Options{
		Namespace: c.name, Codec: o.Codec, Encrypt: o.Encrypt, OnCorrupt: p.l2Corrupt,
	})
	if err != nil {
		_ = sh.Close()
		return &ConfigError{Pipeline: c.name, Field: "Backend", Problem: err.Error()}
	}
	p.l2 = backendL2[V]{Remote: rs, shared: sh}
	p.notifier = sh
	if c.lockOn {
		p.locker = sh
	}
	d := p.deps()
	d.Check = p.checkBackend(sh)
	p.co = coord.NewBackend(d, sh)
	p.writes.origin = newOrigin()
	stop := sh.Watch(func(key, origin string) {
		if origin != p.writes.origin {
			p.dropLocal(key)
		}
	}, func() {
		p.dropAllLocal()
		p.writes.resubscribed.Add(1)
	})
	p.closers = append(p.closers, func() error { stop(); return nil }, sh.Close)
	return nil
}

// l2Corrupt hears the L2 store's reads of bytes that do not decode.
func (p *Pipeline[V]) l2Corrupt(_ string, err error) {
	if p.decryptFailed(err) {
		return
	}
	if p.tel.Metering() {
		p.tel.Corrupt(context.Background(), "l2")
	}
}

// l2Attrs is the attributes of an L2 client span: db.system.name and
// the operation, Redis's command or the backend's method.
func (p *Pipeline[V]) l2Attrs(redisOp, backendOp string, more ...attribute.KeyValue) []attribute.KeyValue {
	return p.co.L2Attrs(redisOp, backendOp, more...)
}
