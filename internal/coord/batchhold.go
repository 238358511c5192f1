package coord

import (
	"context"
	"sync/atomic"

	"github.com/herdguard/herdguard/backend"
)

// BatchHold keeps a batch's leases alive while its loader call runs. The
// leases granted without a watchdog share one (a batch's), which extends
// them all in one round trip per beat; a lease that beats since its grant
// (see lookThenLockMany) keeps its grant's watchdog until End. Its zero
// value holds nothing; it is used by one goroutine.
type BatchHold struct {
	w      Watchdog
	leases []*backend.Lease
	lost   []*atomic.Bool
	grants []*Grant
}

// Add puts a lease into h: g's when g is not nil (its watchdog already
// beats, and marks g.Lost), else lease, which the batch's watchdog marks
// lost in lost. A nil lease and grant (a key loaded without the lock)
// adds nothing.
func (h *BatchHold) Add(lease *backend.Lease, lost *atomic.Bool, g *Grant) {
	switch {
	case g != nil:
		h.grants = append(h.grants, g)
	case lease != nil:
		h.leases = append(h.leases, lease)
		h.lost = append(h.lost, lost)
	}
}

// Watch starts the batch's watchdog over the leases added without a
// grant, beating on co until End or ctx ends.
func (h *BatchHold) Watch(ctx context.Context, co extender) {
	h.w.Watch(ctx, co, h.leases, h.lost)
}

// End stops the batch's watchdog and those of the grants added, waiting
// for a beat under way: the leases are about to be committed or given
// back.
func (h *BatchHold) End() {
	h.w.Stop()
	for _, g := range h.grants {
		g.End()
	}
}
