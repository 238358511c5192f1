package cache

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxEntries is the size bound of a [Memory] whose MaxEntries is 0.
const DefaultMaxEntries = 10_000

// MemoryOptions configures a [Memory]. The zero value is ready to use.
type MemoryOptions struct {
	// MaxEntries bounds how many keys the cache holds. When a write would
	// pass the bound, one entry is evicted (SIEVE: recently read entries get
	// a second chance, the oldest unread one goes).
	// default: 10,000
	MaxEntries int
}

// Memory is a bounded in-process cache of [Entry] values.
//
// Reads take no lock: the index is a [sync.Map], so a hot key read from many
// goroutines does not contend. Writes and evictions lock one shard of the
// eviction lists. Memory is safe for concurrent use.
type Memory[V any] struct {
	// index maps a key to its *item. Reads load from it without locks;
	// every store into it or delete from it happens under the key's shard
	// mutex, so the index and the shard lists agree.
	index    sync.Map
	shards   []memShard[V]
	mask     uint64
	perShard int
	seed     maphash.Seed
	// epoch is the monotonic base of item deadlines: time.Since(epoch) reads
	// only the monotonic clock, which is cheaper than time.Now.
	epoch time.Time
}

type item[V any] struct {
	key   string
	entry Entry[V]
	// fresh and stale are monotonic deadlines in nanoseconds since epoch.
	fresh, stale int64
	// visited is SIEVE's bit: set by reads, cleared by the eviction hand.
	visited atomic.Bool
	// prev and next link the shard's FIFO list; guarded by the shard mutex.
	prev, next *item[V]
}

type memShard[V any] struct {
	mu sync.Mutex // guards the list, hand and n
	// head is the newest item, tail the oldest; the hand moves from tail
	// towards head.
	head, tail, hand *item[V]
	n                int
}

// NewMemory returns an empty cache configured by o.
func NewMemory[V any](o MemoryOptions) *Memory[V] {
	max := o.MaxEntries
	if max <= 0 {
		max = DefaultMaxEntries
	}
	// Enough shards that writers rarely meet, few enough that each shard's
	// share of the bound stays meaningful (at least 64 entries a shard).
	n := 1
	for n < 64 && max/(n*2) >= 64 {
		n *= 2
	}
	return &Memory[V]{
		shards:   make([]memShard[V], n),
		mask:     uint64(n - 1),
		perShard: (max + n - 1) / n,
		seed:     maphash.MakeSeed(),
		epoch:    time.Now(),
	}
}

func (m *Memory[V]) mono() int64 { return int64(time.Since(m.epoch)) }

// Lookup returns the entry for key and how fresh it is. A key that is absent,
// or whose grace period has passed, is a [Miss].
func (m *Memory[V]) Lookup(key string) (Entry[V], Freshness) {
	v, ok := m.index.Load(key)
	if !ok {
		return Entry[V]{}, Miss
	}
	it := v.(*item[V])
	now := m.mono()
	if now >= it.stale {
		return Entry[V]{}, Miss
	}
	if !it.visited.Load() { // read first: a hot key's line is not written on every hit
		it.visited.Store(true)
	}
	if now < it.fresh {
		return it.entry, Fresh
	}
	return it.entry, Stale
}

// Set stores e under key, replacing any entry there. Its freshness comes
// from e.Expires and e.StaleUntil, measured against the wall clock now.
func (m *Memory[V]) Set(key string, e Entry[V]) {
	now := time.Now()
	base := m.mono()
	it := &item[V]{
		key:   key,
		entry: e,
		fresh: base + int64(e.Expires.Sub(now)),
		stale: base + int64(e.StaleUntil.Sub(now)),
	}
	if it.stale < it.fresh {
		it.stale = it.fresh
	}
	sh := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if old, loaded := m.index.Swap(key, it); loaded {
		sh.unlink(old.(*item[V]))
	} else if sh.n >= m.perShard {
		m.evictLocked(sh)
	}
	sh.pushFront(it)
}

// Delete removes key. It reports whether an entry was there.
func (m *Memory[V]) Delete(key string) bool {
	sh := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	old, ok := m.index.LoadAndDelete(key)
	if ok {
		sh.unlink(old.(*item[V]))
	}
	return ok
}

// Len returns the number of entries held, including stale ones not yet
// evicted.
func (m *Memory[V]) Len() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

func (m *Memory[V]) shard(key string) *memShard[V] {
	return &m.shards[maphash.String(m.seed, key)&m.mask]
}

// evictLocked removes one item from sh, SIEVE style. sh.mu must be held.
func (m *Memory[V]) evictLocked(sh *memShard[V]) {
	now := m.mono()
	h := sh.hand
	if h == nil {
		h = sh.tail
	}
	// Each pass clears at most n visited bits, so two passes always find a
	// victim; the bound keeps the loop finite whatever readers do meanwhile.
	for i := 0; h != nil && i < 2*sh.n+1; i++ {
		if h.visited.Load() && now < h.stale {
			h.visited.Store(false)
			h = h.prev
			if h == nil {
				h = sh.tail
			}
			continue
		}
		break
	}
	if h == nil {
		return
	}
	sh.hand = h.prev
	sh.unlink(h)
	m.index.CompareAndDelete(h.key, h)
}

func (sh *memShard[V]) pushFront(it *item[V]) {
	it.next = sh.head
	it.prev = nil
	if sh.head != nil {
		sh.head.prev = it
	}
	sh.head = it
	if sh.tail == nil {
		sh.tail = it
	}
	sh.n++
}

func (sh *memShard[V]) unlink(it *item[V]) {
	if sh.hand == it {
		sh.hand = it.prev
	}
	if it.prev != nil {
		it.prev.next = it.next
	} else {
		sh.head = it.next
	}
	if it.next != nil {
		it.next.prev = it.prev
	} else {
		sh.tail = it.prev
	}
	it.prev, it.next = nil, nil
	sh.n--
}
