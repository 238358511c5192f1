package rlock

import (
	"context"
	"time"

	"github.com/herdguard/herdguard/backend"
)

// holder is what this package's lockers implement for their leases (a
// copy of package lock's, whose Memory has its own).
type holder interface {
	release(ctx context.Context, key, token string) error
	extend(ctx context.Context, key, token string, lease time.Duration) error
}

// leaseHolder adapts a holder to backend.Holder, so that the lockers'
// callbacks stay unexported.
type leaseHolder struct{ h holder }

func (a leaseHolder) Release(ctx context.Context, key, token string) error {
	return a.h.release(ctx, key, token)
}

func (a leaseHolder) Extend(ctx context.Context, key, token string, ttl time.Duration) error {
	return a.h.extend(ctx, key, token, ttl)
}

// newLease returns the lease of a grant by h, beating every every.
func newLease(h holder, key, token string, fence int64, ttl, every time.Duration, tookOver bool) *backend.Lease {
	if every <= 0 {
		every = time.Millisecond
	}
	return backend.NewLease(leaseHolder{h}, backend.Grant{Key: key, Token: token, Fence: fence, TTL: ttl, Heartbeat: every, TookOver: tookOver})
}
