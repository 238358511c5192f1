package lock

import (
	"context"
	"time"

	"github.com/herdguard/herdguard/backend"
)

// Locker grants leases on keys. Implementations are safe for concurrent use.
type Locker interface {
	// TryAcquire makes one attempt to take key for the given lease. It
	// returns [backend.ErrNotAcquired] when another holder has it. It never leaves
	// a lock behind when it returns an error, even when ctx ends mid-call.
	TryAcquire(ctx context.Context, key string, lease time.Duration) (*backend.Lease, error)
	// Inspect reports whether key is held and how much of its lease is left.
	Inspect(ctx context.Context, key string) (held bool, remaining time.Duration, err error)
}

// holder is what this package's lockers implement for their leases.
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
