package remote

import (
	"context"
	"fmt"

	"github.com/herdguard/herdguard/internal/rcache"
)

// Announcer is what [Announced] needs of a backend's view: its
// announcement of a write ([backend.Shared] has it).
type Announcer interface {
	Announce(ctx context.Context, key, origin string) error
}

// Announced is a backend's store as the pipeline's L2 ([rcache.Store]):
// a [Remote], with Write's and Invalidate's announcements made through
// the backend.
type Announced[V any] struct {
	*Remote[V]
	shared Announcer
}

var _ rcache.Store[int] = Announced[int]{}

// NewAnnounced returns r, whose writes and invalidations a announces.
func NewAnnounced[V any](r *Remote[V], a Announcer) Announced[V] {
	return Announced[V]{Remote: r, shared: a}
}

// Write stores e at a fence of its own, then announces it.
func (b Announced[V]) Write(ctx context.Context, key string, e rcache.Entry[V], o rcache.WriteOptions) (int64, error) {
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
func (b Announced[V]) Invalidate(ctx context.Context, key string, o rcache.WriteOptions) (int64, error) {
	f, err := b.Remote.Invalidate(ctx, key, o.Hold)
	if err != nil {
		return 0, err
	}
	if err := b.shared.Announce(ctx, key, o.Origin); err != nil {
		return f, fmt.Errorf("resilience: announce an invalidation: %w", err)
	}
	return f, nil
}
