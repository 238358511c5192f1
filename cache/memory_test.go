package cache

import (
	"fmt"
	"sync"
	"testing"
	"time"
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
	if n := m.Len(); n > 256+64 { // the bound is per shard, rounded up
		t.Fatalf("Len = %d, far over the bound", n)
	}
}

func TestJitter_bounds(t *testing.T) {
	for range 1000 {
		d := Jitter(time.Second, 0.2)
		if d < 800*time.Millisecond || d > time.Second {
			t.Fatalf("Jitter = %v, outside [800ms, 1s]", d)
		}
	}
	if Jitter(time.Second, 0) != time.Second || Jitter(time.Second, 2) != time.Second {
		t.Fatal("out-of-range fraction should leave ttl alone")
	}
}
