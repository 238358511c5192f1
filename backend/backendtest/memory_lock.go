package backendtest

import (
	"context"
	"fmt"
	"time"

	"github.com/herdguard/herdguard/backend"
)

// The lock of a Memory view.

// TryAcquire implements [backend.Shared].
func (v *view) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*backend.Lease, error) {
	if key == "" || ttl <= 0 {
		return nil, fmt.Errorf("backendtest: acquire: bad key or lease %v", ttl)
	}
	if err := v.check(ctx); err != nil {
		return nil, &backend.BackendError{Op: "acquire", Err: err}
	}
	every := v.heartbeat
	if every <= 0 || every > ttl/3 {
		every = ttl / 3
	}
	now := time.Now()
	sp := v.sp
	sp.mu.Lock()
	defer sp.mu.Unlock()
	tookOver := false
	if l, ok := sp.locks[key]; ok && now.Before(l.expires) {
		if now.Sub(l.beat) <= 2*l.every {
			return nil, backend.ErrNotAcquired
		}
		tookOver = true // the holder missed two beats
	}
	g := backend.Grant{Key: key, Token: newToken(), Fence: sp.next(key), TTL: ttl, Heartbeat: every, TookOver: tookOver}
	sp.locks[key] = memLock{token: g.Token, fence: g.Fence, expires: now.Add(ttl), beat: now, every: every}
	return backend.NewLease(v, g), nil
}

// Inspect implements [backend.Shared].
func (v *view) Inspect(ctx context.Context, key string) (bool, time.Duration, error) {
	if err := v.check(ctx); err != nil {
		return false, 0, &backend.BackendError{Op: "inspect", Err: err}
	}
	now := time.Now()
	v.sp.mu.Lock()
	defer v.sp.mu.Unlock()
	l, ok := v.sp.locks[key]
	if !ok || !now.Before(l.expires) {
		return false, 0, nil
	}
	return true, l.expires.Sub(now), nil
}

// held reports whether token holds key's lock; sp.mu held.
func (sp *space) held(key, token string, now time.Time) bool {
	l, ok := sp.locks[key]
	return ok && l.token == token && now.Before(l.expires)
}

// Release implements backend.Holder.
func (v *view) Release(ctx context.Context, key, token string) error {
	if err := v.check(ctx); err != nil {
		return &backend.BackendError{Op: "release", Err: err}
	}
	v.sp.mu.Lock()
	defer v.sp.mu.Unlock()
	if !v.sp.held(key, token, time.Now()) {
		return backend.ErrNotHeld
	}
	delete(v.sp.locks, key)
	return nil
}

// Extend implements backend.Holder.
func (v *view) Extend(ctx context.Context, key, token string, ttl time.Duration) error {
	if err := v.check(ctx); err != nil {
		return &backend.BackendError{Op: "extend", Err: err}
	}
	now := time.Now()
	v.sp.mu.Lock()
	defer v.sp.mu.Unlock()
	if !v.sp.held(key, token, now) {
		return backend.ErrNotHeld
	}
	l := v.sp.locks[key]
	l.expires, l.beat = now.Add(ttl), now
	v.sp.locks[key] = l
	return nil
}
