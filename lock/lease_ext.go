package lock

import (
	"context"
	"time"
)

// Holder is what a [Lease] made by [NewLease] calls back into: the locker
// that granted it. Lockers outside this package implement it.
type Holder interface {
	// Release gives up key's lock if token still holds it; otherwise it
	// returns [ErrNotHeld].
	Release(ctx context.Context, key, token string) error
	// Extend resets key's lease to ttl from now, and records a beat, if
	// token still holds it; otherwise it returns [ErrNotHeld].
	Extend(ctx context.Context, key, token string, ttl time.Duration) error
}

// Grant describes a lock grant, for [NewLease].
type Grant struct {
	Key   string
	Token string
	// Fence is the grant's fencing number; later grants of Key have
	// larger ones.
	Fence int64
	// TTL is the lease the lock was granted for.
	TTL time.Duration
	// Heartbeat is the watchdog's period ([Lease.KeepAlive]).
	// default: a third of TTL
	Heartbeat time.Duration
	// TookOver says the grant replaced a holder that stopped beating.
	TookOver bool
}

// NewLease returns the lease of grant g, released and extended through h:
// how a [Locker] outside this package hands out leases.
func NewLease(h Holder, g Grant) *Lease {
	every := g.Heartbeat
	if every <= 0 {
		every = g.TTL / 3
	}
	l := newLease(holderOf{h}, g.Key, g.Token, g.Fence, g.TTL, every)
	l.tookOver = g.TookOver
	return l
}

// holderOf adapts a Holder to the package's own callbacks.
type holderOf struct{ h Holder }

func (a holderOf) release(ctx context.Context, key, token string) error {
	return a.h.Release(ctx, key, token)
}

func (a holderOf) extend(ctx context.Context, key, token string, ttl time.Duration) error {
	return a.h.Extend(ctx, key, token, ttl)
}
