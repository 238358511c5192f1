package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
)

// TestTryAcquire_concurrent_shareStatements: the acquires of many keys in
// one process, at once, run in a few statements, not one per key; each
// key is granted once, however many ask for it.
func TestTryAcquire_concurrent_shareStatements(t *testing.T) {
	v, tr := tracedView(t, "SELECT o_i, o_fence, o_how FROM")
	ctx := testCtx(t)
	const keys, askers = 200, 2 // every key asked twice at once
	var wg sync.WaitGroup
	leases := make([]*backend.Lease, keys*askers)
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
			case !errors.Is(errs[i], backend.ErrNotAcquired):
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

// TestTryAcquire_ofAHeldKey_locksNoRow: an acquire that finds a live
// holder answers without locking the key's row, so that the holder's
// beats and its save never wait for another process's statement of
// acquires, which holds the rows it locked until it ends. Here that
// statement stays open in a transaction while the holder beats.
func TestTryAcquire_ofAHeldKey_locksNoRow(t *testing.T) {
	f := newFixture(t, Options{})
	holder := f.open("rows", time.Second)
	ctx := testCtx(t)
	lease, err := holder.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lease.Release(ctx) }()

	other := f.backend()
	tx, err := other.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var i, how int
	var fence int64
	err = tx.QueryRow(ctx, other.q.acquireMany, []string{holder.ns}, []string{rowKey("k")}, []string{"another-token"},
		[]int64{time.Minute.Microseconds()}, []int64{time.Second.Microseconds()}).Scan(&i, &fence, &how)
	if err != nil || how != 0 {
		t.Fatalf("acquire of a held key in the open statement: how %d, %v; want 0 (held)", how, err)
	}
	// The beat runs while that transaction is still open.
	bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := lease.Extend(bctx, time.Minute); err != nil {
		t.Fatalf("the holder's beat beside another process's open acquire of its key: %v; want it through at once", err)
	}
}

// TestSave_besideItsOwnOpenBeat_locksNoRow: a holder's beat takes no row
// lock that its save needs: with the beat's statement still open in a
// transaction (a beat of thousands of leases in flight), the holder's
// save writes and releases at once. (It waited for the beat's row locks,
// and past the operation timeout in a burst of 5,000 keys x 4 pods.)
func TestSave_besideItsOwnOpenBeat_locksNoRow(t *testing.T) {
	f := newFixture(t, Options{})
	holder := f.open("rows", time.Second)
	ctx := testCtx(t)
	lease, err := holder.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lease.Release(ctx) }()

	other := f.backend()
	tx, err := other.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var i int
	err = tx.QueryRow(ctx, other.q.extendMany, []string{holder.ns}, []string{rowKey("k")}, []string{lease.Token()},
		[]int64{time.Minute.Microseconds()}).Scan(&i)
	if err != nil || i != 1 {
		t.Fatalf("the beat in the open statement: %d, %v; want the lease extended", i, err)
	}
	// The save runs while that transaction is still open.
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stored, err := holder.Save(sctx, "k", []byte("v"), backend.Save{Fence: lease.Fence(), Token: lease.Token(), Release: true,
		Until: time.Now().Add(time.Minute)})
	if err != nil || !stored {
		t.Fatalf("the holder's save beside its own open beat: stored %v, %v; want it through at once", stored, err)
	}
	lease.Forget()
	// The beat that lands after the release extends nothing.
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if held, _, err := holder.Inspect(ctx, "k"); err != nil || held {
		t.Fatalf("after the save's release and the beat's commit: held %v, %v; want free", held, err)
	}
}
