package postgres

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
)

// TestLoad_concurrentLoads_shareStatements: the loads of many keys in one
// process, at once, are read in a few statements, not one per key, and
// each gets its own key's value, or none.
func TestLoad_concurrentLoads_shareStatements(t *testing.T) {
	v, tr := tracedView(t, "WITH ORDINALITY AS r(ns, key, i)")
	ctx := testCtx(t)
	const n = 400
	until := time.Now().Add(time.Minute)
	for i := 0; i < n; i += 2 { // the even keys have values
		if _, err := v.Save(ctx, fmt.Sprintf("k%d", i), fmt.Appendf(nil, "v%d", i), backend.Save{Until: until}); err != nil {
			t.Fatal(err)
		}
	}
	before := tr.n.Load()
	var wg sync.WaitGroup
	got := make([][]byte, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { got[i], errs[i] = v.Load(ctx, fmt.Sprintf("k%d", i)) })
	}
	wg.Wait()
	for i := range n {
		want := ""
		if i%2 == 0 {
			want = fmt.Sprintf("v%d", i)
		}
		if errs[i] != nil || string(got[i]) != want || (want == "") != (got[i] == nil) {
			t.Fatalf("load of k%d: %q, %v; want %q", i, got[i], errs[i], want)
		}
	}
	if s := tr.n.Load() - before; s > n/4 {
		t.Fatalf("%d statements for %d concurrent loads, want at most %d", s, n, n/4)
	}
	t.Logf("%d statements for %d concurrent loads", tr.n.Load()-before, n)
}
