package postgres

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/herdguard/herdguard/lock"
)

// TestTryAcquire_concurrent_shareStatements: the acquires of many keys in
// one process, at once, run in a few statements, not one per key; each
// key is granted once, however many ask for it.
func TestTryAcquire_concurrent_shareStatements(t *testing.T) {
	v, tr := tracedView(t, "SELECT o_i, o_fence, o_how FROM")
	ctx := testCtx(t)
	const keys, askers = 200, 2 // every key asked twice at once
	var wg sync.WaitGroup
	leases := make([]*lock.Lease, keys*askers)
	errs := make([]error, keys*askers)
	for i := range leases {
		wg.Go(func() { leases[i], errs[i] = v.TryAcquire(ctx, fmt.Sprintf("k%d", i%keys), time.Minute) })
	}
	wg.Wait()
	for k := range keys {
		granted := 0
		for a := range askers {
			i := a*keys + k
			switch {
			case errs[i] == nil:
				granted++
				if leases[i].Fence() <= 0 {
					t.Fatalf("k%d granted with fence %d", k, leases[i].Fence())
				}
			case !errors.Is(errs[i], lock.ErrNotAcquired):
				t.Fatalf("acquire of k%d: %v", k, errs[i])
			}
		}
		if granted != 1 {
			t.Fatalf("k%d granted %d times, want once", k, granted)
		}
	}
	// maxAcquireBatch to a statement at best; half as many calls as
	// statements at worst, on a loaded machine.
	if s := tr.n.Load(); s > keys*askers/2 {
		t.Fatalf("%d statements for %d concurrent acquires, want at most %d", s, keys*askers, keys*askers/2)
	}
	t.Logf("%d statements for %d concurrent acquires", tr.n.Load(), keys*askers)
	for _, l := range leases {
		if l != nil {
			_ = l.Release(ctx)
		}
	}
}
