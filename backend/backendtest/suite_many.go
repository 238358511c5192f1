package backendtest

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
)

// The checks of the batch forms ([backend.SharedMany]), for a view that
// has them; a view without them skips them.

// many returns vs as SharedMany views, skipping t when they are not.
func many(t *testing.T, vs []backend.Shared) []backend.SharedMany {
	t.Helper()
	out := make([]backend.SharedMany, len(vs))
	for i, v := range vs {
		m, ok := v.(backend.SharedMany)
		if !ok {
			t.Skip("the view has no batch forms (backend.SharedMany)")
		}
		out[i] = m
	}
	return out
}

// loadMany: LoadMany answers each key as Load does, in the order of the
// keys: the stored bytes, nil for a key with no value and for one past its
// Until.
func (s suite) loadMany(t *testing.T) {
	ctx := ctxOf(t)
	vs := s.views(t, 2, time.Second)
	ms := many(t, vs)
	save(t, ctx, vs[0], "a", []byte("va"), backend.Save{})
	save(t, ctx, vs[0], "c", []byte("vc"), backend.Save{})
	save(t, ctx, vs[0], "gone", []byte("x"), backend.Save{Until: time.Now().Add(-time.Second)})
	keys := []string{"c", "b", "a", "gone"}
	for i, m := range ms {
		got, err := m.LoadMany(ctx, keys)
		if err != nil {
			t.Fatalf("view %d: LoadMany: %v", i, err)
		}
		if len(got) != len(keys) {
			t.Fatalf("view %d: LoadMany of %d keys: %d answers", i, len(keys), len(got))
		}
		want := [][]byte{[]byte("vc"), nil, []byte("va"), nil}
		for j := range keys {
			if (got[j] == nil) != (want[j] == nil) || !bytes.Equal(got[j], want[j]) {
				t.Fatalf("view %d: LoadMany: %q is %q, want %q", i, keys[j], got[j], want[j])
			}
		}
	}
}

// tryAcquireMany: TryAcquireMany grants each free key, with a fence above
// the key's earlier grants and a token of its own, and refuses the keys a
// live holder has (in this view or another) with backend.ErrNotAcquired; its
// leases release and extend as TryAcquire's do; of many views asking the
// same keys at once, one wins each key.
func (s suite) tryAcquireMany(t *testing.T) {
	ctx := ctxOf(t)
	vs := s.views(t, 4, time.Second)
	ms := many(t, vs)
	held := acquire(t, ctx, vs[1], "held", 10*time.Second)
	first := acquire(t, ctx, vs[0], "a", 10*time.Second)
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	keys := []string{"b", "held", "a"}
	leases, errs := ms[0].TryAcquireMany(ctx, keys, 10*time.Second)
	if len(leases) != len(keys) || len(errs) != len(keys) {
		t.Fatalf("TryAcquireMany of %d keys: %d leases, %d errors", len(keys), len(leases), len(errs))
	}
	if !errors.Is(errs[1], backend.ErrNotAcquired) || leases[1] != nil {
		t.Fatalf("TryAcquireMany of a held key: %v, %v; want backend.ErrNotAcquired", leases[1], errs[1])
	}
	for _, j := range []int{0, 2} {
		l := leases[j]
		if errs[j] != nil || l == nil || l.Key() != keys[j] || l.Token() == "" || l.Fence() <= 0 {
			t.Fatalf("TryAcquireMany of the free key %q: %+v, %v", keys[j], l, errs[j])
		}
	}
	if leases[2].Fence() <= first.Fence() || leases[0].Token() == leases[2].Token() {
		t.Fatalf("TryAcquireMany's grants: fence %d after %d, tokens %q and %q; want a larger fence, tokens of their own",
			leases[2].Fence(), first.Fence(), leases[0].Token(), leases[2].Token())
	}
	if _, err := vs[2].TryAcquire(ctx, "b", 10*time.Second); !errors.Is(err, backend.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a key TryAcquireMany granted: %v; want backend.ErrNotAcquired", err)
	}
	if err := leases[0].Extend(ctx, 10*time.Second); err != nil {
		t.Fatalf("Extend of a lease TryAcquireMany granted: %v", err)
	}
	for _, l := range []*backend.Lease{leases[0], leases[2], held} {
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release of %q: %v", l.Key(), err)
		}
	}
	// Many views, the same keys, at once: one winner per key.
	keys = make([]string, 50)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	type result struct {
		leases []*backend.Lease
		errs   []error
	}
	results := make(chan result, len(ms))
	for _, m := range ms {
		go func() {
			ls, es := m.TryAcquireMany(ctx, keys, 10*time.Second)
			results <- result{ls, es}
		}()
	}
	wins := make([]int, len(keys))
	for range ms {
		r := <-results
		for j := range keys {
			switch {
			case r.errs[j] == nil:
				wins[j]++
			case !errors.Is(r.errs[j], backend.ErrNotAcquired):
				t.Errorf("TryAcquireMany of %q: %v", keys[j], r.errs[j])
			}
		}
	}
	for j, n := range wins {
		if n != 1 {
			t.Fatalf("%q: %d winners among %d views asking at once, want 1", keys[j], n, len(ms))
		}
	}
}
