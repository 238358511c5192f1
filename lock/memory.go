package lock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"
)

// Memory is a [Locker] within one process: the embedded default when no
// Redis is configured. The zero value is ready to use.
type Memory struct {
	mu     sync.Mutex // guards locks and fences
	locks  map[string]memLock
	fences map[string]int64
}

type memLock struct {
	token   string
	expires time.Time
}

var _ Locker = (*Memory)(nil)

// TryAcquire implements [Locker].
func (m *Memory) TryAcquire(ctx context.Context, key string, lease time.Duration) (*Lease, error) {
	if err := checkArgs(key, lease); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if l, ok := m.locks[key]; ok && now.Before(l.expires) {
		return nil, ErrNotAcquired
	}
	if m.locks == nil {
		m.locks = make(map[string]memLock)
		m.fences = make(map[string]int64)
	}
	tok := newToken()
	m.fences[key]++
	m.locks[key] = memLock{token: tok, expires: now.Add(lease)}
	return newLease(m, key, tok, m.fences[key], lease, lease/3), nil
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
	if !ok || l.token != token || !time.Now().Before(l.expires) {
		return ErrNotHeld
	}
	delete(m.locks, key)
	return nil
}

func (m *Memory) extend(_ context.Context, key, token string, lease time.Duration) error {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.locks[key]
	if !ok || l.token != token || !now.Before(l.expires) {
		return ErrNotHeld
	}
	l.expires = now.Add(lease)
	m.locks[key] = l
	return nil
}

func checkArgs(key string, lease time.Duration) error {
	if key == "" {
		return fmt.Errorf("lock: empty key")
	}
	if lease <= 0 {
		return fmt.Errorf("lock: lease must be positive, got %v", lease)
	}
	return nil
}

// newToken returns 16 random bytes, hex encoded.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}
