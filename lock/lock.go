package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

var (
	// ErrNotAcquired means another holder owns the lock.
	ErrNotAcquired = errors.New("lock: not acquired")
	// ErrNotHeld means the lease was lost: it expired, or another holder
	// took the lock after it did. Returned by Release and Extend.
	ErrNotHeld = errors.New("lock: not held")
	// ErrBackend is matched by every [*BackendError].
	ErrBackend = errors.New("lock: backend failed")
)

// BackendError reports that the lock backend failed, so the outcome of the
// operation is unknown or it did not happen. It does not name the key:
// keys may be secrets (no error of this package names one).
type BackendError struct {
	// Op is the operation that failed: "acquire", "release", "extend",
	// "inspect" or "notify".
	Op string
	// Err is the backend's error.
	Err error
}

func (e *BackendError) Error() string {
	return fmt.Sprintf("lock: %s: backend failed: %v", e.Op, e.Err)
}

// Unwrap returns the backend's error.
func (e *BackendError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrBackend].
func (e *BackendError) Is(target error) bool { return target == ErrBackend }

// Locker grants leases on keys. Implementations are safe for concurrent use.
type Locker interface {
	// TryAcquire makes one attempt to take key for the given lease. It
	// returns [ErrNotAcquired] when another holder has it. It never leaves
	// a lock behind when it returns an error, even when ctx ends mid-call.
	TryAcquire(ctx context.Context, key string, lease time.Duration) (*Lease, error)
	// Inspect reports whether key is held and how much of its lease is left.
	Inspect(ctx context.Context, key string) (held bool, remaining time.Duration, err error)
}

// holder is what a Lease calls back into; implemented by this package's
// lockers only.
type holder interface {
	release(ctx context.Context, key, token string) error
	extend(ctx context.Context, key, token string, lease time.Duration) error
}

// Lease is a granted lock. Its methods are safe for concurrent use.
type Lease struct {
	key   string
	token string
	fence int64
	ttl   time.Duration
	every time.Duration // the watchdog's period
	h     holder
	// tookOver is set by the locker before the lease is handed out.
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

func newLease(h holder, key, token string, fence int64, ttl, every time.Duration) *Lease {
	if every <= 0 {
		every = time.Millisecond
	}
	return &Lease{key: key, token: token, fence: fence, ttl: ttl, every: every, h: h}
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

// Extend resets the lease to ttl from now, if this grant still holds the
// lock; otherwise it returns [ErrNotHeld].
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("lock: extend: lease must be positive, got %v", ttl)
	}
	return l.h.extend(ctx, l.key, l.token, ttl)
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
	return l.h.release(ctx, l.key, l.token)
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
// heartbeat period of the locker that granted it (for [Memory], every
// third of the lease) until Release is called or ctx ends, so a slow
// holder does not lose the lock and waiters see that it lives. onLost, if
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
	err := l.h.extend(ectx, l.key, l.token, l.ttl)
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
