package lock

import (
	"context"
	"sync"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/internal/rlock"
)

// Memory is a [Locker] within one process: the embedded default when no
// Redis is configured. The zero value is ready to use.
//
// Fences come from one counter for all keys, so a grant's fence is above
// every earlier grant's, of its key and of any other: fences never go
// backwards for a key although nothing is kept for a key once its lock is
// released. Memory therefore grows with the keys locked at once, not with
// every key ever locked: a released lock is forgotten at once, and one
// whose lease ran out unreleased (a holder that never released it) when
// the table is next swept, which an acquisition does once the table has
// doubled since the last sweep.
type Memory struct {
	mu      sync.Mutex // guards locks, fence, sweepAt and holder
	locks   map[string]memLock
	fence   int64 // the last fence granted, for any key
	sweepAt int   // len(locks) at which TryAcquire drops expired locks
	// holder releases and extends the leases m grants; set by the first
	// grant.
	holder *rlock.Holder
}

type memLock struct {
	token   string
	expires time.Time
}

// minSweep is the smallest table Memory sweeps for expired locks: below
// it, a few unreleased entries cost less than looking for them.
const minSweep = 1024

var _ Locker = (*Memory)(nil)

// TryAcquire implements [Locker].
func (m *Memory) TryAcquire(ctx context.Context, key string, lease time.Duration) (*backend.Lease, error) {
	if err := rlock.CheckArgs(key, lease); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if l, ok := m.locks[key]; ok && now.Before(l.expires) {
		return nil, backend.ErrNotAcquired
	}
	if m.locks == nil {
		m.locks = make(map[string]memLock)
	}
	if len(m.locks) >= max(m.sweepAt, minSweep) {
		m.sweep(now)
	}
	tok := rlock.NewToken()
	m.fence++
	m.locks[key] = memLock{token: tok, expires: now.Add(lease)}
	if m.holder == nil {
		m.holder = &rlock.Holder{Rel: m.release, Ext: m.extend}
	}
	return rlock.NewLease(m.holder, key, tok, m.fence, lease, lease/3, false), nil
}

// sweep drops the locks whose lease has run out, and sets the size of the
// next sweep to twice what is left, so that sweeps cost O(1) per
// acquisition. m.mu must be held.
func (m *Memory) sweep(now time.Time) {
	for k, l := range m.locks {
		if !now.Before(l.expires) {
			delete(m.locks, k)
		}
	}
	m.sweepAt = 2 * len(m.locks)
}

// Inspect implements [Locker].
func (m *Memory) Inspect(_ context.Context, key string) (bool, time.Duration, error) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.locks[key]
	if !ok || !now.Before(l.expires) {
		return false, 0, nil
	}
	return true, l.expires.Sub(now), nil
}

func (m *Memory) release(_ context.Context, key, token string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.locks[key]
	if !ok || l.token != token {
		return backend.ErrNotHeld
	}
	delete(m.locks, key) // the holder's own entry, even if its lease ran out
	if !time.Now().Before(l.expires) {
		return backend.ErrNotHeld
	}
	return nil
}

func (m *Memory) extend(_ context.Context, key, token string, lease time.Duration) error {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.locks[key]
	if !ok || l.token != token || !now.Before(l.expires) {
		return backend.ErrNotHeld
	}
	l.expires = now.Add(lease)
	m.locks[key] = l
	return nil
}
