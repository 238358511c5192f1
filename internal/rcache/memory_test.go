package rcache

import (
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"
)

func memEntry(v int, ttl, grace time.Duration) Entry[int] {
	now := time.Now()
	return Entry[int]{Value: v, Written: now, Expires: now.Add(ttl), StaleUntil: now.Add(ttl + grace)}
}

func TestMemory_Lookup_freshStaleMiss(t *testing.T) {
	m := NewMemory[int](MemoryOptions{})
	m.Set("fresh", memEntry(1, time.Hour, 0))
	m.Set("stale", memEntry(2, -time.Millisecond, time.Hour))
	m.Set("gone", memEntry(3, -time.Hour, time.Millisecond))
	m.Set("zero", memEntry(0, time.Hour, 0))
	cases := []struct {
		key  string
		want Freshness
		val  int
	}{
		{"fresh", Fresh, 1},
		{"stale", Stale, 2},
		{"gone", Miss, 0},
		{"zero", Fresh, 0},
		{"absent", Miss, 0},
	}
	for _, tc := range cases {
		e, f := m.Lookup(tc.key)
		if e == nil {
			e = &Entry[int]{}
		}
		if f != tc.want || e.Value != tc.val {
			t.Errorf("%s: got %v %d, want %v %d", tc.key, f, e.Value, tc.want, tc.val)
		}
	}
}

func TestMemory_Set_replacesAndDelete(t *testing.T) {
	m := NewMemory[int](MemoryOptions{})
	m.Set("k", memEntry(1, time.Hour, 0))
	m.Set("k", memEntry(2, time.Hour, 0))
	if e, f := m.Lookup("k"); f != Fresh || e.Value != 2 {
		t.Fatalf("got %v %d, want the newer value", f, e.Value)
	}
	if m.Len() != 1 {
		t.Fatalf("Len = %d, want 1", m.Len())
	}
	if !m.Delete("k") || m.Delete("k") {
		t.Fatal("Delete should report true once, then false")
	}
	if _, f := m.Lookup("k"); f != Miss || m.Len() != 0 {
		t.Fatal("deleted key still there")
	}
}

func TestMemory_bound_evictsUnreadFirst(t *testing.T) {
	const max = 100
	m := NewMemory[int](MemoryOptions{MaxEntries: max})
	for i := range max {
		m.Set(fmt.Sprint(i), memEntry(i, time.Hour, 0))
	}
	// Read the first half: SIEVE gives read entries a second chance.
	for i := range max / 2 {
		m.Lookup(fmt.Sprint(i))
	}
	for i := max; i < max+max/2; i++ {
		m.Set(fmt.Sprint(i), memEntry(i, time.Hour, 0))
	}
	if n := m.Len(); n > max {
		t.Fatalf("Len = %d, over the bound %d", n, max)
	}
	kept := 0
	for i := range max / 2 {
		if _, f := m.Lookup(fmt.Sprint(i)); f == Fresh {
			kept++
		}
	}
	if kept != max/2 {
		t.Fatalf("%d of %d read entries survived, want all: unread ones go first", kept, max/2)
	}
}

func TestMemory_concurrent(t *testing.T) {
	m := NewMemory[int](MemoryOptions{MaxEntries: 256})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				k := fmt.Sprint((g*7 + i) % 512)
				if i%3 == 0 {
					m.Set(k, memEntry(i, time.Hour, 0))
				} else if i%17 == 0 {
					m.Delete(k)
				} else {
					m.Lookup(k)
				}
			}
		}()
	}
	wg.Wait()
	if n, held := m.Len(), heldEntries(m); n > 256 || held != n {
		t.Fatalf("Len = %d, shards hold %d; want the same, at most the bound 256", n, held)
	}
}

// heldEntries counts the entries in the shards' lists.
func heldEntries[V any](m *Memory[V]) int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		for it := sh.head; it != nil; it = it.next {
			n++
		}
		sh.mu.Unlock()
	}
	return n
}

func TestMemory_holdsExactlyMaxEntries(t *testing.T) {
	for _, max := range []int{1, 100, 10_000, 100_000} {
		m := NewMemory[int](MemoryOptions{MaxEntries: max})
		for i := range max {
			m.Set(fmt.Sprint(i), memEntry(i, time.Hour, 0))
		}
		found := 0
		for i := range max {
			if _, f := m.Find(fmt.Sprint(i)); f == Fresh {
				found++
			}
		}
		if found != max || m.Len() != max {
			t.Fatalf("MaxEntries %d: %d found, Len %d after writing %d keys; want all", max, found, m.Len(), max)
		}
		for i := max; i < 2*max; i++ {
			m.Set(fmt.Sprint(i), memEntry(i, time.Hour, 0))
		}
		if n, held := m.Len(), heldEntries(m); n != max || held != max {
			t.Fatalf("MaxEntries %d: Len %d, held %d after writing twice as many; want the bound", max, n, held)
		}
	}
}

// A write past the bound into a shard with no entry evicts from another.
func TestMemory_bound_evictsFromAnotherShard(t *testing.T) {
	const max = 256
	m := NewMemory[int](MemoryOptions{MaxEntries: max})
	if len(m.shards) < 2 {
		t.Fatalf("%d shards; the test needs two", len(m.shards))
	}
	shardOf := func(k string) uint64 { return maphash.String(m.seed, k) & m.bmask & m.smask }
	n := 0
	for i := 0; n < max; i++ {
		if k := fmt.Sprint(i); shardOf(k) == 0 {
			m.Set(k, memEntry(i, time.Hour, 0))
			n++
		}
	}
	other := ""
	for i := 0; other == ""; i++ {
		if k := fmt.Sprint("o", i); shardOf(k) != 0 {
			other = k
		}
	}
	m.Set(other, memEntry(-1, time.Hour, 0))
	if held := heldEntries(m); held != max || m.n.Load() != max {
		t.Fatalf("held %d, counted %d; want the bound %d", held, m.n.Load(), max)
	}
	if _, f := m.Find(other); f != Fresh {
		t.Fatal("the new entry is not there")
	}
}

func TestMemory_entryRoundTrip(t *testing.T) {
	m := NewMemory[string](MemoryOptions{})
	now := time.Now()
	in := Entry[string]{
		Value: "v", Written: now.Add(-time.Second), Expires: now.Add(time.Minute),
		StaleUntil: now.Add(time.Hour), LoadDuration: 1234 * time.Microsecond, Fence: 7,
	}
	m.Set("k", in)
	e, f := m.Lookup("k")
	if f != Fresh {
		t.Fatalf("freshness %v, want fresh", f)
	}
	near := func(a, b time.Time) bool { d := a.Sub(b); return d > -time.Millisecond && d < time.Millisecond }
	if e.Value != "v" || e.NotFound || e.LoadDuration != in.LoadDuration || e.Fence != 0 ||
		!near(e.Written, in.Written) || !near(e.Expires, in.Expires) || !near(e.StaleUntil, in.StaleUntil) {
		t.Fatalf("read back %+v, want %+v (Fence 0)", *e, in)
	}
	h, _ := m.Find("k")
	if h.Value() != "v" || h.NotFound() || h.LoadDuration() != in.LoadDuration || !near(h.Written(), in.Written) {
		t.Fatalf("hit: %q %v %v %v", h.Value(), h.NotFound(), h.LoadDuration(), h.Written())
	}
	if d := h.FreshFor(); d <= 59*time.Second || d > time.Minute {
		t.Fatalf("FreshFor = %v, want about a minute", d)
	}

	m.Set("nf", Entry[string]{NotFound: true, Expires: now.Add(time.Minute)})
	if h, f := m.Find("nf"); f != Fresh || !h.NotFound() || !h.Written().IsZero() {
		t.Fatalf("not-found entry: %v, NotFound %v, Written %v", f, h.NotFound(), h.Written())
	}
	if e, _ := m.Lookup("nf"); !e.NotFound || !e.Written.IsZero() || !near(e.StaleUntil, e.Expires) {
		t.Fatalf("not-found entry read back %+v", *e)
	}

	// Times at the ends of time.Time's range neither overflow nor wrap.
	m.Set("forever", Entry[string]{Value: "f", Expires: time.Unix(math.MaxInt64/2, 0), StaleUntil: time.Unix(math.MaxInt64/2, 0)})
	if _, f := m.Find("forever"); f != Fresh {
		t.Fatalf("an entry fresh until the far future is %v", f)
	}
	m.Set("never", Entry[string]{Value: "n", Expires: time.Unix(-math.MaxInt64/2, 0), StaleUntil: time.Unix(-math.MaxInt64/2, 0)})
	if _, f := m.Find("never"); f != Miss {
		t.Fatalf("an entry that expired in the far past is %v", f)
	}
}

func TestMemory_Find_noAllocs(t *testing.T) {
	m := NewMemory[string](MemoryOptions{})
	m.Set("k", Entry[string]{Value: "v", Expires: time.Now().Add(time.Hour)})
	if n := testing.AllocsPerRun(100, func() { m.Find("k") }); n != 0 {
		t.Fatalf("Find: %v allocs, want 0", n)
	}
}

// An entry of a string value takes one 96-byte size class: the per-entry
// memory the L1Memory benchmark compares with otter's.
func TestMemory_itemSize(t *testing.T) {
	if n := unsafe.Sizeof(item[string]{}); n > 96 {
		t.Fatalf("an item of a string is %d bytes, want at most 96", n)
	}
}

// TestMemory_inSynctestBubble_agesOnTheBubblesClock: in a testing/synctest
// bubble, where time.Now has no monotonic reading and starts at the
// bubble's epoch, an entry goes stale and then away as the bubble's clock
// passes its deadlines, and reads back its times on that clock, though the
// cache's own epoch was taken outside the bubble.
func TestMemory_inSynctestBubble_agesOnTheBubblesClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := NewMemory[int](MemoryOptions{})
		written := time.Now()
		m.Set("k", Entry[int]{Value: 1, Written: written, Expires: written.Add(time.Minute), StaleUntil: written.Add(time.Hour)})
		steps := []struct {
			after time.Duration
			want  Freshness
		}{
			{0, Fresh},
			{time.Minute - time.Nanosecond, Fresh},
			{time.Minute, Stale},
			{time.Hour - time.Nanosecond, Stale},
			{time.Hour, Miss},
		}
		for _, s := range steps {
			time.Sleep(time.Until(written.Add(s.after)))
			if h, f := m.Find("k"); f != s.want {
				t.Fatalf("%v after the write: %v, want %v", s.after, f, s.want)
			} else if f == Fresh && (!h.Written().Equal(written) || h.FreshFor() != time.Minute-s.after) {
				t.Fatalf("%v after the write: written %v, fresh for %v; want %v, %v", s.after, h.Written(), h.FreshFor(), written, time.Minute-s.after)
			}
		}
	})
}

func TestMemory_Clear(t *testing.T) {
	m := NewMemory[int](MemoryOptions{MaxEntries: 1000})
	for i := range 500 {
		m.Set(string(rune('a'+i%26))+string(rune(i)), memEntry(i, time.Minute, time.Minute))
	}
	m.Clear()
	if n := m.Len(); n != 0 {
		t.Fatalf("Len after Clear = %d", n)
	}
	m.Set("x", memEntry(1, time.Minute, time.Minute))
	if _, f := m.Lookup("x"); f != Fresh {
		t.Fatal("Set after Clear does not hold")
	}
}
