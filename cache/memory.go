package cache

import (
	"hash/maphash"
	"math/bits"
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
// Because the cache is bounded, its hash table never grows: it has a fixed
// number of buckets, each the head of a short chain that readers walk with
// atomic loads and no lock. Writers lock one shard, which owns a fixed set of
// buckets and the eviction list of the entries in them. A hot key read from
// many goroutines therefore writes no shared memory, which a map behind a
// read-write mutex (whose reader count every read bumps) cannot say; and a
// string-keyed table hashes faster than [sync.Map]'s interface keys.
// Memory is safe for concurrent use.
type Memory[V any] struct {
	buckets  []atomic.Pointer[item[V]] // chain heads; written under the owning shard's mutex
	bmask    uint64
	shards   []memShard[V]
	smask    uint64
	perShard int
	seed     maphash.Seed
	// epoch is the monotonic base of item deadlines: time.Since(epoch) reads
	// only the monotonic clock.
	epoch time.Time
}

type item[V any] struct {
	key   string
	hash  uint64
	entry Entry[V] // never modified once the item is published
	// fresh and stale are monotonic deadlines in nanoseconds since epoch.
	fresh, stale int64
	// visited is SIEVE's bit: set by reads, cleared by the eviction hand.
	visited atomic.Bool
	// chain is the next item in the bucket. Readers load it without locks;
	// writers change it under the shard mutex. An unlinked item keeps its
	// chain, so a reader standing on it still reaches the rest.
	chain atomic.Pointer[item[V]]
	// prev and next link the shard's FIFO list; guarded by the shard mutex.
	prev, next *item[V]
}

type memShard[V any] struct {
	mu sync.Mutex // guards the list, hand, n, and the chains of the shard's buckets
	// head is the newest item, tail the oldest; the hand moves from tail
	// towards head.
	head, tail, hand *item[V]
	n                int
	_                [40]byte // keep neighbouring shards' mutexes off one cache line
}

// NewMemory returns an empty cache configured by o.
func NewMemory[V any](o MemoryOptions) *Memory[V] {
	bound := o.MaxEntries
	if bound <= 0 {
		bound = DefaultMaxEntries
	}
	// Enough shards that writers rarely meet, few enough that each shard's
	// share of the bound stays meaningful (at least 64 entries a shard).
	ns := 1
	for ns < 64 && bound/(ns*2) >= 64 {
		ns *= 2
	}
	// About one bucket per entry: chains stay short at the bound.
	nb := 1 << bits.Len(uint(bound-1))
	nb = max(nb, ns)
	return &Memory[V]{
		buckets:  make([]atomic.Pointer[item[V]], nb),
		bmask:    uint64(nb - 1),
		shards:   make([]memShard[V], ns),
		smask:    uint64(ns - 1),
		perShard: (bound + ns - 1) / ns,
		seed:     maphash.MakeSeed(),
		epoch:    time.Now(),
	}
}

func (m *Memory[V]) mono() int64 { return int64(time.Since(m.epoch)) }

// find walks key's bucket without locks.
func (m *Memory[V]) find(key string) *item[V] {
	h := maphash.String(m.seed, key)
	for it := m.buckets[h&m.bmask].Load(); it != nil; it = it.chain.Load() {
		if it.hash == h && it.key == key {
			return it
		}
	}
	return nil
}

// Lookup returns the entry for key and how fresh it is. A key that is
// absent, or whose grace period has passed, is a [Miss] with a nil entry.
//
// The entry is shared with other readers and must not be modified.
func (m *Memory[V]) Lookup(key string) (*Entry[V], Freshness) {
	it := m.find(key)
	if it == nil {
		return nil, Miss
	}
	now := m.mono()
	if now >= it.stale {
		return nil, Miss
	}
	if !it.visited.Load() { // read first: a hot key's line is not written on every hit
		it.visited.Store(true)
	}
	if now < it.fresh {
		return &it.entry, Fresh
	}
	return &it.entry, Stale
}

// Set stores e under key, replacing any entry there. Its freshness comes
// from e.Expires and e.StaleUntil, measured against the wall clock now.
func (m *Memory[V]) Set(key string, e Entry[V]) {
	now := time.Now()
	base := m.mono()
	h := maphash.String(m.seed, key)
	it := &item[V]{
		key:   key,
		hash:  h,
		entry: e,
		fresh: base + int64(e.Expires.Sub(now)),
		stale: base + int64(e.StaleUntil.Sub(now)),
	}
	if it.stale < it.fresh {
		it.stale = it.fresh
	}
	b := h & m.bmask
	sh := &m.shards[b&m.smask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if old := m.unchainLocked(b, key, h); old != nil {
		sh.unlink(old)
	} else if sh.n >= m.perShard {
		m.evictLocked(sh)
	}
	it.chain.Store(m.buckets[b].Load())
	m.buckets[b].Store(it) // publish: readers see the whole item from here on
	sh.pushFront(it)
}

// Delete removes key. It reports whether an entry was there.
func (m *Memory[V]) Delete(key string) bool {
	h := maphash.String(m.seed, key)
	b := h & m.bmask
	sh := &m.shards[b&m.smask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	old := m.unchainLocked(b, key, h)
	if old != nil {
		sh.unlink(old)
	}
	return old != nil
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

// unchainLocked removes key from bucket b's chain and returns its item, or
// nil. The shard mutex of b must be held.
func (m *Memory[V]) unchainLocked(b uint64, key string, h uint64) *item[V] {
	var prev *item[V]
	for it := m.buckets[b].Load(); it != nil; prev, it = it, it.chain.Load() {
		if it.hash != h || it.key != key {
			continue
		}
		if prev == nil {
			m.buckets[b].Store(it.chain.Load())
		} else {
			prev.chain.Store(it.chain.Load())
		}
		return it
	}
	return nil
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
	m.unchainLocked(h.hash&m.bmask, h.key, h.hash)
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
