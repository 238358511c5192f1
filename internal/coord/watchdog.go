package coord

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herdguard/herdguard/backend"
)

// extender is the part of the seam a watchdog beats on.
type extender interface {
	ExtendMany(ctx context.Context, leases []*backend.Lease) (lost []bool, err error)
}

// Grant is a lease this process holds while it loads.
type Grant struct {
	Lease *backend.Lease
	// Lost is set by the watchdog when an extension finds the lease gone
	// (taken over, or lost with Redis's keys): the value is then not
	// written back.
	Lost atomic.Bool
	// Released is set once the write-back released the lock too; read
	// and written by the holder's goroutine only.
	Released bool
	// w is the lease's watchdog: a batch of one lease.
	w     Watchdog
	one   [1]*backend.Lease
	onesL [1]*atomic.Bool
}

// Hold starts lease's watchdog, which beats on co until End is called or
// ctx ends, and returns the grant it marks lost: the batch's watchdog for
// a batch of one.
func Hold(ctx context.Context, co extender, lease *backend.Lease) *Grant {
	g := &Grant{Lease: lease}
	g.one[0], g.onesL[0] = lease, &g.Lost
	g.w.Watch(ctx, co, g.one[:], g.onesL[:])
	return g
}

// End stops g's watchdog, waiting for a beat under way: the lease is
// being given back, or was by a commit.
func (g *Grant) End() { g.w.Stop() }

// Watchdog beats for a set of leases, each on the seam's ExtendMany: the
// one beat loop, for one lease (Hold) or a batch's. It runs on a timer:
// no goroutine waits between beats.
type Watchdog struct {
	mu      sync.Mutex // held by a beat under way
	t       *time.Timer
	stopped bool
	// leases are those not found lost yet; lost[i] is set when leases[i]
	// is.
	leases []*backend.Lease
	lost   []*atomic.Bool
}

// Watch starts w, beating on co for leases every period of the one that
// beats most often, until w is stopped, ctx ends, or every lease was
// found lost.
func (w *Watchdog) Watch(ctx context.Context, co extender, leases []*backend.Lease, lost []*atomic.Bool) {
	if len(leases) == 0 {
		return
	}
	every := leases[0].Every()
	for _, l := range leases[1:] {
		every = min(every, l.Every())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.leases, w.lost = leases, lost
	w.t = time.AfterFunc(every, func() { w.beat(ctx, co, every) })
}

// beat is one tick of w: one extension of its leases, and the next tick
// unless w was stopped, ctx ended or no lease is left.
func (w *Watchdog) beat(ctx context.Context, co extender, every time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped || ctx.Err() != nil {
		return
	}
	start := time.Now()
	ectx, cancel := context.WithTimeout(ctx, every)
	gone, _ := co.ExtendMany(ectx, w.leases) // a failure: the next tick retries
	cancel()
	n := 0
	for i, l := range w.leases {
		if i < len(gone) && gone[i] {
			w.lost[i].Store(true)
			continue
		}
		w.leases[n], w.lost[n] = l, w.lost[i]
		n++
	}
	w.leases, w.lost = w.leases[:n], w.lost[:n]
	if n == 0 {
		w.stopped = true
		return
	}
	// Beats keep their period however long an extension took, as a
	// ticker's would.
	w.t.Reset(max(every-time.Since(start), 0))
}

// Stop stops w, waiting for a beat under way.
func (w *Watchdog) Stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.t != nil {
		w.t.Stop()
	}
}
