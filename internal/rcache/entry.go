package rcache

import "time"

// Entry is one cached outcome: a value, or a stored "not found".
//
// The zero Entry is a fresh-less, empty value; a store never returns it for
// a miss (it reports the miss separately).
type Entry[V any] struct {
	// Value is the loaded value. It is the zero value when NotFound is set.
	Value V
	// NotFound records that the loader reported that the key has no
	// value (package cache's ErrNotFound).
	NotFound bool
	// Written is when the value was loaded and stored.
	Written time.Time
	// Expires is when the entry stops being fresh.
	Expires time.Time
	// StaleUntil is when the entry stops being usable as a stale copy.
	// It is never before Expires.
	StaleUntil time.Time
	// LoadDuration is how long the load that produced the entry took.
	LoadDuration time.Duration
	// Fence is the fencing number of the lock grant under which the entry
	// was written; 0 when written without a lock.
	Fence int64
}

// Freshness says how usable a looked-up entry is.
type Freshness uint8

const (
	// Miss means there is no usable entry.
	Miss Freshness = iota
	// Fresh means the entry is within its TTL.
	Fresh
	// Stale means the entry's TTL has passed but it is within its grace
	// period, so it may still be served as a fallback.
	Stale
)

// String returns "miss", "fresh" or "stale".
func (f Freshness) String() string {
	switch f {
	case Fresh:
		return "fresh"
	case Stale:
		return "stale"
	default:
		return "miss"
	}
}

// freshnessAt classifies e at time now.
func (e *Entry[V]) freshnessAt(now time.Time) Freshness {
	switch {
	case now.Before(e.Expires):
		return Fresh
	case now.Before(e.StaleUntil):
		return Stale
	default:
		return Miss
	}
}
