package cache

import "github.com/herdguard/herdguard/internal/rcache"

// MemoryOptions configures a [Memory]. The zero value is ready to use.
type MemoryOptions struct {
	// MaxEntries bounds how many keys the cache holds. When a write would
	// pass the bound, one entry is evicted (SIEVE: recently read entries get
	// a second chance, the oldest unread one goes).
	// default: 10,000
	MaxEntries int
}

// Memory is a bounded in-process cache of [Entry] values: the one a
// pipeline of package resilience keeps in front of its shared store.
//
// Reads take no lock and write no shared memory, so a hot key read from
// many goroutines does not contend; writers lock one of several shards.
// The bound is the cache's, not a shard's: the cache holds exactly
// MaxEntries before it evicts. An entry's times are kept on the process's
// monotonic clock.
// Memory is safe for concurrent use.
type Memory[V any] struct {
	m *rcache.Memory[V]
}

// NewMemory returns an empty cache configured by o.
func NewMemory[V any](o MemoryOptions) *Memory[V] {
	return &Memory[V]{m: rcache.NewMemory[V](rcache.MemoryOptions{MaxEntries: o.MaxEntries})}
}

// Lookup returns a copy of the entry for key, its times on the wall clock,
// and how fresh it is. A key that is absent, or whose grace period has
// passed, is a [Miss] with a nil entry.
func (m *Memory[V]) Lookup(key string) (*Entry[V], Freshness) {
	e, f := m.m.Lookup(key)
	if e == nil {
		return nil, f
	}
	out := outer(*e)
	return &out, f
}

// Set stores e under key, replacing any entry there. Its freshness comes
// from e.Expires and e.StaleUntil, measured against the wall clock now.
func (m *Memory[V]) Set(key string, e Entry[V]) { m.m.Set(key, e.inner()) }

// Delete removes key. It reports whether an entry was there.
func (m *Memory[V]) Delete(key string) bool { return m.m.Delete(key) }

// Clear removes every entry. Readers that already hold an entry keep it;
// lookups that start after Clear returns miss, unless a Set came after.
func (m *Memory[V]) Clear() { m.m.Clear() }

// Len returns the number of entries held, including stale ones not yet
// evicted.
func (m *Memory[V]) Len() int { return m.m.Len() }
