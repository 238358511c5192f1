package cache

import (
	"testing"
	"time"
)

func TestMemory_SetLookupDeleteClear(t *testing.T) {
	m := NewMemory[int](MemoryOptions{MaxEntries: 100})
	now := time.Now()
	m.Set("a", Entry[int]{Value: 1, Written: now, Expires: now.Add(time.Minute), StaleUntil: now.Add(time.Hour)})
	m.Set("b", Entry[int]{NotFound: true, Expires: now.Add(-time.Second), StaleUntil: now.Add(time.Hour)})
	if e, f := m.Lookup("a"); f != Fresh || e == nil || e.Value != 1 || !e.Written.Equal(now) {
		t.Fatalf("Lookup(a) = %+v, %v; want 1, fresh", e, f)
	}
	if e, f := m.Lookup("b"); f != Stale || e == nil || !e.NotFound {
		t.Fatalf("Lookup(b) = %+v, %v; want a stale not-found", e, f)
	}
	if m.Len() != 2 || !m.Delete("a") || m.Delete("a") || m.Len() != 1 {
		t.Fatal("Delete and Len disagree")
	}
	m.Clear()
	if e, f := m.Lookup("b"); f != Miss || e != nil || m.Len() != 0 {
		t.Fatalf("after Clear: %+v, %v, Len %d", e, f, m.Len())
	}
	for i := range 150 {
		m.Set(string(rune('a'+i)), Entry[int]{Value: i, Expires: now.Add(time.Minute), StaleUntil: now.Add(time.Minute)})
	}
	if m.Len() != 100 {
		t.Fatalf("Len = %d past the bound, want 100", m.Len())
	}
}
