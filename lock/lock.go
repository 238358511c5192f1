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
