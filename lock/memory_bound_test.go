package lock

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/herdguard/herdguard/backend"
)

// entries counts what m keeps per key.
func (m *Memory) entries() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.locks)
}

// TestMemory_forgetsReleasedKeys: a million distinct keys acquired and
// released leave nothing behind: no entry in the table, and the heap as it
// was (a million keys' state would take tens of MiB).
func TestMemory_forgetsReleasedKeys(t *testing.T) {
	var m Memory
	ctx := context.Background()
	before := heapInUse()
	for i := range 1_000_000 {
		l, err := m.TryAcquire(ctx, "k"+strconv.Itoa(i), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if grown, limit := int64(heapInUse())-int64(before), int64(8<<20); grown > limit {
		t.Errorf("heap grew by %d bytes over a million released keys, want at most %d", grown, limit)
	}
	if n := m.entries(); n != 0 {
		t.Fatalf("%d entries kept after every lock was released, want 0", n)
	}
}

// heapInUse returns the bytes of live heap objects after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestMemory_sweepsExpiredLocks: locks whose holders never release them
// are dropped once their lease ran out, so the table stays about the size
// of the locks live at once.
func TestMemory_sweepsExpiredLocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var m Memory
		ctx := context.Background()
		const batch, rounds = 40_000, 5
		for r := range rounds {
			for i := range batch {
				if _, err := m.TryAcquire(ctx, strconv.Itoa(r)+":"+strconv.Itoa(i), time.Second); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(2 * time.Second) // the fake clock: every lease of this round runs out
		}
		if n, limit := m.entries(), 2*batch+minSweep; n > limit {
			t.Fatalf("%d entries after %d unreleased locks expired, want at most %d", n, batch*rounds, limit)
		}
	})
}

// TestMemory_fenceRisesAcrossRelease: a key's fence rises with each grant
// although the key is forgotten between them, whatever other keys do
// meanwhile.
func TestMemory_fenceRisesAcrossRelease(t *testing.T) {
	var m Memory
	ctx := context.Background()
	var last int64
	for i := range 100 {
		l, err := m.TryAcquire(ctx, "hot", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= last {
			t.Fatalf("grant %d of one key has fence %d, not above the previous %d", i, l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 { // another key between two grants
			o, err := m.TryAcquire(ctx, "other"+strconv.Itoa(i), time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			_ = o.Release(ctx)
		}
	}
	if n := m.entries(); n != 0 {
		t.Fatalf("%d entries kept, want 0", n)
	}
}

// TestMemory_Release_afterLeaseExpired: a holder releasing too late is told
// it no longer held the lock, and its entry is gone all the same.
func TestMemory_Release_afterLeaseExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var m Memory
		ctx := context.Background()
		l, err := m.TryAcquire(ctx, "k", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // the fake clock: the lease runs out
		if err := l.Release(ctx); !errors.Is(err, backend.ErrNotHeld) {
			t.Fatalf("late release: %v, want backend.ErrNotHeld", err)
		}
		if n := m.entries(); n != 0 {
			t.Fatalf("%d entries after the late release, want 0", n)
		}
	})
}
