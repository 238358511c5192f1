package postgres

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
)

// TestSave_concurrent_shareStatements: the saves of many keys in one
// process, at once, run in a few statements, not one per key; each is
// stored and releases its lock, and a save whose lock was lost stores
// nothing.
func TestSave_concurrent_shareStatements(t *testing.T) {
	v, tr := tracedView(t, "SELECT o_i, o_n FROM")
	var err error
	ctx := testCtx(t)
	const n = 400
	leases := make([]*backend.Lease, n)
	for i := range leases {
		if leases[i], err = v.TryAcquire(ctx, fmt.Sprintf("k%d", i), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.Release(ctx, "k7", leases[7].Token()); err != nil { // k7's lock is lost
		t.Fatal(err)
	}
	until := time.Now().Add(time.Minute)
	var wg sync.WaitGroup
	stored := make([]bool, n)
	errs := make([]error, n)
	for i, l := range leases {
		wg.Go(func() {
			stored[i], errs[i] = v.Save(ctx, l.Key(), fmt.Appendf(nil, "v%d", i),
				backend.Save{Fence: l.Fence(), Token: l.Token(), Release: true, Until: until})
		})
	}
	wg.Wait()
	for i := range n {
		key := fmt.Sprintf("k%d", i)
		got, err := v.Load(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		held, _, err := v.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if i == 7 {
			if !errors.Is(errs[i], backend.ErrLockLost) || got != nil {
				t.Fatalf("save of k7 without its lock: %v, %v, stored %q; want ErrLockLost, nothing stored", stored[i], errs[i], got)
			}
			continue
		}
		if errs[i] != nil || !stored[i] || string(got) != fmt.Sprintf("v%d", i) || held {
			t.Fatalf("save of %s: %v, %v; stored %q, still locked %v", key, stored[i], errs[i], got, held)
		}
	}
	if s := tr.n.Load(); s > n/2 {
		t.Fatalf("%d statements for %d concurrent saves, want at most %d", s, n, n/2)
	}
	t.Logf("%d statements for %d concurrent saves", tr.n.Load(), n)
}
