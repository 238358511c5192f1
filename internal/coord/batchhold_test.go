package coord

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/herdguard/herdguard/backend"
)

// beats records the leases each ExtendMany call extended, and reports
// the leases in gone lost.
type beats struct {
	mu    sync.Mutex
	calls [][]*backend.Lease
	gone  map[*backend.Lease]bool
}

func (b *beats) ExtendMany(_ context.Context, leases []*backend.Lease) ([]bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, slices.Clone(leases))
	lost := make([]bool, len(leases))
	for i, l := range leases {
		lost[i] = b.gone[l]
	}
	return lost, nil
}

func (b *beats) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.calls)
}

func newTestLease(key string) *backend.Lease {
	return backend.NewLease(nil, backend.Grant{Key: key, Token: "t-" + key, TTL: 3 * time.Second})
}

func TestBatchHold_beatsOnceForTheBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, own := newTestLease("a"), newTestLease("b"), newTestLease("own")
		co := &beats{gone: map[*backend.Lease]bool{b: true}}
		var lostA, lostB atomic.Bool
		g := Hold(t.Context(), co, own)

		var h BatchHold
		h.Add(a, &lostA, nil)
		h.Add(b, &lostB, nil)
		h.Add(own, &g.Lost, g)
		h.Add(nil, nil, nil) // a key loaded without the lock
		h.Watch(t.Context(), co)

		<-time.After(time.Second + time.Millisecond) // one beat of each watchdog
		synctest.Wait()
		if n := co.count(); n != 2 {
			t.Fatalf("%d beats after one period; want 2: the batch's, and the grant's own", n)
		}
		if lostA.Load() || !lostB.Load() {
			t.Errorf("lost a, b = %v, %v; want false, true", lostA.Load(), lostB.Load())
		}
		var batch []*backend.Lease
		for _, c := range co.calls {
			if !slices.Contains(c, own) {
				batch = c
			}
		}
		if !slices.Equal(batch, []*backend.Lease{a, b}) {
			t.Errorf("the batch's beat extended %v; want a and b in one call", batch)
		}

		h.End()
		before := co.count()
		<-time.After(5 * time.Second)
		synctest.Wait()
		if n := co.count(); n != before {
			t.Errorf("%d beats after End; want none", n-before)
		}
	})
}

func TestBatchHold_zeroHoldsNothing(t *testing.T) {
	var h BatchHold
	h.Watch(context.Background(), &beats{})
	h.End()
}
