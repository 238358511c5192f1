package rcache

import (
	"hash/maphash"
	"math"
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
//
// The bound is the cache's, not a shard's: the cache holds exactly
// MaxEntries before it evicts. A write past the bound evicts from its own
// shard, so each shard keeps the share it had when the cache filled.
//
// An entry is kept as its value, its flags and four numbers: its write
// time, its deadlines and its load duration, the times as nanoseconds on
// the process's monotonic clock. [Entry.Fence] is not kept: an entry read
// back has Fence 0.
// Memory is safe for concurrent use.
type Memory[V any] struct {
	buckets []atomic.Pointer[item[V]] // chain heads; written under the owning shard's mutex
	bmask   uint64
	shards  []memShard[V]
	smask   uint64
	bound   int64
	n       atomic.Int64 // entries held, all shards
	seed    maphash.Seed
}

// epoch is the base of every item's times: clock reads only the monotonic
// clock (time.Since of a time with a monotonic reading does).
var epoch = time.Now()

// clock returns the monotonic time in nanoseconds since epoch.
func clock() int64 { return int64(time.Since(epoch)) }

// noTime is the stored write time of an entry written with a zero Written.
const noTime = math.MinInt64

// item flags.
const (
	visitedFlag  = 1 << iota // SIEVE's bit: set by reads, cleared by the eviction hand
	notFoundFlag             // the entry is a stored "not found"; fixed at creation
)

type item[V any] struct {
	key   string
	value V
	// chain is the next item in the bucket. Readers load it without locks;
	// writers change it under the shard mutex. An unlinked item keeps its
	// chain, so a reader standing on it still reaches the rest.
	chain atomic.Pointer[item[V]]
	// prev and next link the shard's FIFO list; guarded by the shard mutex.
	prev, next *item[V]
	// written, fresh and stale are times on clock: when the entry was
	// written, until when it is fresh, until when it may be served stale.
	written, fresh, stale int64
	loadDuration          time.Duration
	// hash is the upper half of the key's hash (the lower half picks the
	// bucket): a chain walk skips other keys without reading them.
	hash  uint32
	flags atomic.Uint32
	// Every field but flags, chain, prev and next is fixed once the item is
	// published.
}

type memShard[V any] struct {
	mu sync.Mutex // guards the list, hand, n, and the chains of the shard's buckets
	// head is the newest item, tail the oldest; the hand moves from tail
	// towards head.
	head, tail, hand *item[V]
	n                int
	_                [24]byte // one shard per cache line: neighbouring mutexes do not share one
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
		buckets: make([]atomic.Pointer[item[V]], nb),
		bmask:   uint64(nb - 1),
		shards:  make([]memShard[V], ns),
		smask:   uint64(ns - 1),
		bound:   int64(bound),
		seed:    maphash.MakeSeed(),
	}
}

// Hit is an entry found by [Memory.Find], read in place: building one
// allocates nothing and copies nothing. The zero Hit is no entry and must
// not be read.
type Hit[V any] struct {
	it  *item[V]
	now int64 // when the entry was found, on clock
}

// Value returns the entry's value; the zero value for a stored "not found".
func (h Hit[V]) Value() V { return h.it.value }

// NotFound reports whether the entry is a stored "not found".
func (h Hit[V]) NotFound() bool { return h.it.flags.Load()&notFoundFlag != 0 }

// LoadDuration is how long the load that produced the entry took.
func (h Hit[V]) LoadDuration() time.Duration { return h.it.loadDuration }

// FreshFor is how long the entry stayed fresh after it was found: negative
// once the entry is stale.
func (h Hit[V]) FreshFor() time.Duration { return time.Duration(h.it.fresh - h.now) }

// Written is when the entry was written, on the wall clock (with a
// monotonic reading).
func (h Hit[V]) Written() time.Time { return wall(h.it.written, time.Now()) }

// Entry returns a copy of the entry, its times on the wall clock (with
// monotonic readings). Its Fence is 0.
func (h Hit[V]) Entry() Entry[V] {
	now := time.Now()
	return Entry[V]{
		Value:        h.it.value,
		NotFound:     h.NotFound(),
		Written:      wall(h.it.written, now),
		Expires:      wall(h.it.fresh, now),
		StaleUntil:   wall(h.it.stale, now),
		LoadDuration: h.it.loadDuration,
	}
}

// wall turns t, a time on clock, into a time.Time, given the current time
// now (the wall clock of now, moved back by the monotonic time since t).
func wall(t int64, now time.Time) time.Time {
	if t == noTime {
		return time.Time{}
	}
	return now.Add(time.Duration(t - int64(now.Sub(epoch))))
}

// onClock turns t into a time on clock, given the current time now and
// base, now on clock. It saturates rather than overflow.
func onClock(t, now time.Time, base int64) int64 {
	d := int64(t.Sub(now)) // saturates at the Duration limits
	s := base + d
	switch {
	case d > 0 && s < base:
		return math.MaxInt64
	case d < 0 && s > base:
		return math.MinInt64 + 1 // above noTime
	}
	return s
}

// Find returns the entry for key, read in place, and how fresh it is. A
// key that is absent, or whose grace period has passed, is a [Miss] with
// the zero Hit. Find allocates nothing.
func (m *Memory[V]) Find(key string) (Hit[V], Freshness) {
	h := maphash.String(m.seed, key)
	hi := uint32(h >> 32)
	for it := m.buckets[h&m.bmask].Load(); it != nil; it = it.chain.Load() {
		if it.hash != hi || it.key != key {
			continue
		}
		now := clock()
		if now >= it.stale {
			return Hit[V]{}, Miss
		}
		if f := it.flags.Load(); f&visitedFlag == 0 { // read first: a hot key's line is not written on every hit
			it.flags.Or(visitedFlag)
		}
		if now < it.fresh {
			return Hit[V]{it: it, now: now}, Fresh
		}
		return Hit[V]{it: it, now: now}, Stale
	}
	return Hit[V]{}, Miss
}

// Lookup returns a copy of the entry for key (see [Hit.Entry]) and how
// fresh it is. A key that is absent, or whose grace period has passed, is a
// [Miss] with a nil entry. [Memory.Find] reads without copying.
func (m *Memory[V]) Lookup(key string) (*Entry[V], Freshness) {
	h, f := m.Find(key)
	if f == Miss {
		return nil, Miss
	}
	e := h.Entry()
	return &e, f
}

// Set stores e under key, replacing any entry there. Its freshness comes
// from e.Expires and e.StaleUntil, measured against the wall clock now.
func (m *Memory[V]) Set(key string, e Entry[V]) {
	now := time.Now()
	base := int64(now.Sub(epoch))
	h := maphash.String(m.seed, key)
	it := &item[V]{
		key:          key,
		value:        e.Value,
		written:      noTime,
		fresh:        onClock(e.Expires, now, base),
		stale:        onClock(e.StaleUntil, now, base),
		loadDuration: e.LoadDuration,
		hash:         uint32(h >> 32),
	}
	if !e.Written.IsZero() {
		it.written = onClock(e.Written, now, base)
	}
	if e.NotFound {
		it.flags.Store(notFoundFlag)
	}
	if it.stale < it.fresh {
		it.stale = it.fresh
	}
	b := h & m.bmask
	s := b & m.smask
	sh := &m.shards[s]
	evictElsewhere := false
	sh.mu.Lock()
	if old := m.unchainLocked(b, key, it.hash); old != nil {
		sh.unlink(old)
	} else if m.n.Add(1) > m.bound {
		// Past the bound: this write evicts one entry, from its own shard
		// when it has one.
		if sh.n > 0 {
			m.evictLocked(sh)
		} else {
			evictElsewhere = true
		}
	}
	it.chain.Store(m.buckets[b].Load())
	m.buckets[b].Store(it) // publish: readers see the whole item from here on
	sh.pushFront(it)
	sh.mu.Unlock()
	if evictElsewhere {
		m.evictFrom(s + 1)
	}
}

// evictFrom evicts one entry from the first shard, from s on, that has one.
func (m *Memory[V]) evictFrom(s uint64) {
	for i := range uint64(len(m.shards)) {
		sh := &m.shards[(s+i)&m.smask]
		sh.mu.Lock()
		if sh.n > 0 {
			m.evictLocked(sh)
			sh.mu.Unlock()
			return
		}
		sh.mu.Unlock()
	}
	// Every shard emptied meanwhile: nothing is over the bound any more.
}

// Delete removes key. It reports whether an entry was there.
func (m *Memory[V]) Delete(key string) bool {
	h := maphash.String(m.seed, key)
	b := h & m.bmask
	sh := &m.shards[b&m.smask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	old := m.unchainLocked(b, key, uint32(h>>32))
	if old != nil {
		sh.unlink(old)
		m.n.Add(-1)
	}
	return old != nil
}

// Len returns the number of entries held, including stale ones not yet
// evicted.
func (m *Memory[V]) Len() int {
	return int(min(m.n.Load(), m.bound)) // a write past the bound counts before it evicts
}

// unchainLocked removes key from bucket b's chain and returns its item, or
// nil. The shard mutex of b must be held.
func (m *Memory[V]) unchainLocked(b uint64, key string, hi uint32) *item[V] {
	var prev *item[V]
	for it := m.buckets[b].Load(); it != nil; prev, it = it, it.chain.Load() {
		if it.hash != hi || it.key != key {
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
	now := clock()
	h := sh.hand
	if h == nil {
		h = sh.tail
	}
	// Each pass clears at most n visited bits, so two passes always find a
	// victim; the bound keeps the loop finite whatever readers do meanwhile.
	for i := 0; h != nil && i < 2*sh.n+1; i++ {
		if h.flags.Load()&visitedFlag != 0 && now < h.stale {
			h.flags.And(^uint32(visitedFlag))
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
	m.n.Add(-1)
	m.unchainLocked(maphash.String(m.seed, h.key)&m.bmask, h.key, h.hash)
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
