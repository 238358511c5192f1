package backend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Holder is what a [Lease] made by [NewLease] calls back into: the locker
// that granted it.
type Holder interface {
	// Release gives up key's lock if token still holds it; otherwise it
	// returns [ErrNotHeld].
	Release(ctx context.Context, key, token string) error
	// Extend resets key's lease to ttl from now, and records a beat, if
	// token still holds it; otherwise it returns [ErrNotHeld].
	Extend(ctx context.Context, key, token string, ttl time.Duration) error
}

// Grant describes a lock grant, for [NewLease].
type Grant struct {
	// Key is the locked key.
	Key string
	// Token is the grant's random token, which Release and Extend pass
	// back to the [Holder].
	Token string
	// Fence is the grant's fencing number; later grants of Key have
	// larger ones.
	Fence int64
	// TTL is the lease the lock was granted for.
	TTL time.Duration
	// Heartbeat is the watchdog's period ([Lease.KeepAlive]).
	// default: a third of TTL
	Heartbeat time.Duration
	// TookOver says the grant replaced a holder that stopped beating.
	TookOver bool
}

// NewLease returns the lease of grant g, released and extended through h:
// how a locker (a [Shared]'s TryAcquire, package lock's lockers) hands out
// leases with the watchdog of [Lease.KeepAlive].
func NewLease(h Holder, g Grant) *Lease {
	every := g.Heartbeat
	if every <= 0 {
		every = g.TTL / 3
	}
	if every <= 0 {
		every = time.Millisecond
	}
	return &Lease{key: g.Key, token: g.Token, fence: g.Fence, ttl: g.TTL, every: every, h: h, tookOver: g.TookOver}
}

// Lease is a granted lock. Its methods are safe for concurrent use.
type Lease struct {
	key   string
	token string
	fence int64
	ttl   time.Duration
	every time.Duration // the watchdog's period
	h     Holder
	// tookOver says the grant replaced a holder that stopped beating.
	tookOver bool

	mu       sync.Mutex // guards watch and released
	watch    *watchdog
	released bool
}

// watchdog beats for a lease on a timer, so a holder whose load ends
// before the first beat (the usual case) costs no goroutine.
type watchdog struct {
	run     sync.Mutex // held by a beat while it runs, and by stop
	stopped bool       // guarded by run
	t       *time.Timer
}

// TookOver reports whether the grant replaced a holder that had stopped
// beating (or a lock key holding foreign data) rather than a free lock.
func (l *Lease) TookOver() bool { return l.tookOver }

// Key returns the locked key.
func (l *Lease) Key() string { return l.key }

// Token returns the random token that identifies this grant.
func (l *Lease) Token() string { return l.token }

// Fence returns the grant's fencing number. Later grants of the same key
// have larger numbers.
func (l *Lease) Fence() int64 { return l.fence }

// TTL returns the lease duration the lock was granted for.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Every returns how often the lease's watchdog beats.
func (l *Lease) Every() time.Duration { return l.every }

// Detach stops the watchdog and marks the lease released without telling
// the backend, as Forget does, and returns the [Holder] that granted it
// and whether the lease was released already: for a locker that releases
// many of its leases in one request (the pipeline's Redis locker releasing a batch).
func (l *Lease) Detach() (h Holder, released bool) {
	l.stopWatchdog()
	l.mu.Lock()
	released = l.released
	l.released = true
	l.mu.Unlock()
	return l.h, released
}

// Extend resets the lease to ttl from now, if this grant still holds the
// lock; otherwise it returns [ErrNotHeld].
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("lock: extend: lease must be positive, got %v", ttl)
	}
	return l.h.Extend(ctx, l.key, l.token, ttl)
}

// Release gives the lock up, if this grant still holds it, and stops the
// watchdog. Releasing twice returns nil; releasing a lost lease returns
// [ErrNotHeld].
func (l *Lease) Release(ctx context.Context) error {
	l.stopWatchdog()
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return nil
	}
	l.released = true
	l.mu.Unlock()
	return l.h.Release(ctx, l.key, l.token)
}

// Forget stops the watchdog and marks the lease released without telling
// the backend: for a holder whose lock was released by another command
// (package cache's Commit writes the value and releases in one round
// trip). A later Release returns nil and does nothing.
func (l *Lease) Forget() {
	l.stopWatchdog()
	l.mu.Lock()
	l.released = true
	l.mu.Unlock()
}

// KeepAlive starts a watchdog that extends the lease, and beats, every
// heartbeat period of the locker that granted it ([Grant].Heartbeat; for
// lock.Memory, every third of the lease) until Release is called or ctx
// ends, so a slow holder does not lose the lock and waiters see that it
// lives. onLost, if
// not nil, is called once (from the watchdog's timer goroutine) when an
// extension finds the lease lost; backend errors are retried at the next
// tick. Calling KeepAlive twice has no further effect. The watchdog runs
// on a timer: no goroutine waits between beats.
func (l *Lease) KeepAlive(ctx context.Context, onLost func(error)) {
	l.mu.Lock()
	if l.watch != nil || l.released {
		l.mu.Unlock()
		return
	}
	w := &watchdog{}
	l.watch = w
	l.mu.Unlock()
	w.run.Lock()
	defer w.run.Unlock()
	w.t = time.AfterFunc(l.every, func() {
		if lost := l.beat(ctx, w); lost != nil && onLost != nil {
			onLost(lost)
		}
	})
}

// beat is one tick of w: an extension, and the next tick unless the lease
// was found lost (returned) or w was stopped or ctx ended.
func (l *Lease) beat(ctx context.Context, w *watchdog) error {
	w.run.Lock()
	defer w.run.Unlock()
	if w.stopped || ctx.Err() != nil {
		return nil
	}
	start := time.Now()
	ectx, cancel := context.WithTimeout(ctx, l.every)
	err := l.h.Extend(ectx, l.key, l.token, l.ttl)
	cancel()
	if errors.Is(err, ErrNotHeld) {
		w.stopped = true
		return err
	}
	// Beats keep their period however long an extension took, as a
	// ticker's would.
	w.t.Reset(max(l.every-time.Since(start), 0))
	return nil
}

// stopWatchdog stops the watchdog, waiting for a beat under way.
func (l *Lease) stopWatchdog() {
	l.mu.Lock()
	w := l.watch
	l.mu.Unlock()
	if w == nil {
		return
	}
	w.run.Lock()
	w.stopped = true
	w.t.Stop()
	w.run.Unlock()
}
