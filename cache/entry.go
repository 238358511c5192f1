package cache

import (
	"errors"
	"time"

	"github.com/herdguard/herdguard/internal/rcache"
)

// ErrNotFound is what a loader returns to say that the key has no value.
// Stored as a negative entry, it is served from the cache as this error until
// the entry expires.
var ErrNotFound = errors.New("cache: not found")

// Entry is one cached outcome: a value, or a stored "not found". The zero
// Entry is a fresh-less, empty value; a store never returns it for a miss
// (it reports the miss separately).
type Entry[V any] struct {
	// Value is the loaded value; the zero value when NotFound is set.
	Value V
	// NotFound records that the loader reported [ErrNotFound].
	NotFound bool
	// Written is when the value was loaded and stored.
	Written time.Time
	// Expires is when the entry stops being fresh.
	Expires time.Time
	// StaleUntil is when the entry stops being usable as a stale copy; it
	// is never before Expires.
	StaleUntil time.Time
}

// inner is e as the stores keep it: written without a lock (fence 0).
func (e Entry[V]) inner() rcache.Entry[V] {
	return rcache.Entry[V]{Value: e.Value, NotFound: e.NotFound, Written: e.Written, Expires: e.Expires, StaleUntil: e.StaleUntil}
}

// outer is the Entry of a stored entry.
func outer[V any](e rcache.Entry[V]) Entry[V] {
	return Entry[V]{Value: e.Value, NotFound: e.NotFound, Written: e.Written, Expires: e.Expires, StaleUntil: e.StaleUntil}
}

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
