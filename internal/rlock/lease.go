package rlock

import (
	"context"
	"time"

	"github.com/herdguard/herdguard/backend"
)

// Holder is a locker's release and extend of the leases it grants, as
// their [backend.Holder], so that the locker's own methods stay
// unexported. This package's Redis and package lock's Memory grant their
// leases through it.
type Holder struct {
	Rel func(ctx context.Context, key, token string) error
	Ext func(ctx context.Context, key, token string, lease time.Duration) error
}

// Release implements [backend.Holder].
func (h *Holder) Release(ctx context.Context, key, token string) error {
	return h.Rel(ctx, key, token)
}

// Extend implements [backend.Holder].
func (h *Holder) Extend(ctx context.Context, key, token string, ttl time.Duration) error {
	return h.Ext(ctx, key, token, ttl)
}

// NewLease returns the lease of a grant by h (whose leases are told
// apart by it: see Redis.ReleaseMany), beating every every (a
// millisecond when every is not positive).
func NewLease(h *Holder, key, token string, fence int64, ttl, every time.Duration, tookOver bool) *backend.Lease {
	if every <= 0 {
		every = time.Millisecond
	}
	return backend.NewLease(h, backend.Grant{Key: key, Token: token, Fence: fence, TTL: ttl, Heartbeat: every, TookOver: tookOver})
}
