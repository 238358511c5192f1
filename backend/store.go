package backend

import (
	"context"
	"time"
)

// Store is a shared (L2) byte store with fenced writes, implemented by a
// [Shared] view (package cache's Remote reads and writes entries over it;
// package cache's Redis speaks to Redis itself). Values are opaque to the
// store: envelopes the caller encoded, possibly sealed. The store keeps each value's fence in clear
// beside it, to order writes.
type Store interface {
	// Load returns the bytes stored for key, or nil with a nil error when
	// there are none or they are past their Until.
	Load(ctx context.Context, key string) ([]byte, error)
	// Save stores raw for key until s.Until, under the rules of s, and
	// reports whether it did. A write refused by the fence rule returns
	// (false, nil); one whose s.Token no longer holds key's lock returns
	// an error matching [ErrLockLost] and writes nothing.
	Save(ctx context.Context, key string, raw []byte, s Save) (stored bool, err error)
	// NextFence returns a fence for key above every lock grant and write
	// of key so far, for a write made without the lock (Set, Invalidate).
	// With revoke it also ends the current grant of key's lock: its
	// holder's next Save with its token fails with ErrLockLost, and its
	// next extension with [ErrNotHeld].
	NextFence(ctx context.Context, key string, revoke bool) (int64, error)
}

// Save says how [Store.Save] writes.
type Save struct {
	// Fence is the written entry's fence. The write is refused when the
	// stored entry's fence is larger, and when Fence is 0 (a write made
	// without a lock) and the stored one is not.
	Fence int64
	// Token, if not empty, is the lock grant the write is made under:
	// the write happens only while key's lock is held under Token.
	Token string
	// Release, with Token, releases key's lock in the same step (whether
	// the fence rule let the write through or not) and wakes key's
	// waiters in every process.
	Release bool
	// Until is when the store may drop the value (the entry's
	// stale-until).
	Until time.Time
}
