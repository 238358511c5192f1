package cache

import (
	"errors"

	"github.com/herdguard/herdguard/internal/rcache"
)

// ErrNotFound is what a loader returns to say that the key has no value.
// Stored as a negative entry, it is served from the cache as this error until
// the entry expires.
var ErrNotFound = errors.New("cache: not found")

// Entry is one cached outcome: a value, or a stored "not found".
//
// Its fields:
//
//   - Value is the loaded value; the zero value when NotFound is set.
//   - NotFound records that the loader reported [ErrNotFound].
//   - Written is when the value was loaded and stored.
//   - Expires is when the entry stops being fresh.
//   - StaleUntil is when the entry stops being usable as a stale copy; it
//     is never before Expires.
//   - LoadDuration is how long the load that produced the entry took.
//   - Fence is the fencing number of the lock grant under which the entry
//     was written; 0 when written without a lock, as a user of this
//     package alone writes ([Redis.Set]). [Memory] does not keep it.
//
// The zero Entry is a fresh-less, empty value; a store never returns it for
// a miss (it reports the miss separately).
type Entry[V any] = rcache.Entry[V]

// Freshness says how usable a looked-up entry is: [Fresh], [Stale] or
// [Miss]. Its String method returns "fresh", "stale" or "miss".
type Freshness = rcache.Freshness

const (
	// Miss means there is no usable entry.
	Miss = rcache.Miss
	// Fresh means the entry is within its TTL.
	Fresh = rcache.Fresh
	// Stale means the entry's TTL has passed but it is within its grace
	// period, so it may still be served as a fallback.
	Stale = rcache.Stale
)
