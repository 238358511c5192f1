package postgres

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
)

// race runs TryAcquire of key from every view at once, several times per
// view, and returns the grants.
func race(t *testing.T, views []*shared, key string) []*backend.Lease {
	t.Helper()
	ctx := testCtx(t)
	var mu sync.Mutex // guards won
	var won []*backend.Lease
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, v := range views {
		for range 4 {
			wg.Go(func() {
				<-start
				l, err := v.TryAcquire(ctx, key, time.Minute)
				switch {
				case err == nil:
					mu.Lock()
					won = append(won, l)
					mu.Unlock()
				case !errors.Is(err, backend.ErrNotAcquired):
					t.Errorf("TryAcquire: %v", err)
				}
			})
		}
	}
	close(start)
	wg.Wait()
	return won
}

func TestLock_TryAcquire_concurrentFirstGrants_oneWinner(t *testing.T) {
	f := newFixture(t, Options{})
	views := []*shared{f.open("ns", 0), f.open("ns", 0), f.open("ns", 0), f.open("ns", 0)}
	ctx := testCtx(t)
	for i := range 20 {
		won := race(t, views, fmt.Sprintf("cold:%d", i))
		if len(won) != 1 {
			t.Fatalf("key %d: %d grants, want 1", i, len(won))
		}
		_ = won[0].Release(ctx)
	}
}

func TestLock_TryAcquire_concurrentTakeOvers_oneWinner(t *testing.T) {
	f := newFixture(t, Options{})
	holder := f.open("ns", 20*time.Millisecond)
	views := []*shared{f.open("ns", 0), f.open("ns", 0), f.open("ns", 0)}
	ctx := testCtx(t)
	for i := range 5 {
		key := fmt.Sprintf("dead:%d", i)
		dead, err := holder.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // five of its beats missed
		won := race(t, views, key)
		if len(won) != 1 || !won[0].TookOver() || won[0].Fence() <= dead.Fence() {
			t.Fatalf("key %d: %d grants (want 1, taken over, above fence %d)", i, len(won), dead.Fence())
		}
		_ = won[0].Release(ctx)
	}
}
