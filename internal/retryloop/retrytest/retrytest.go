// Package retrytest is a fake clock for the tests of the retry loop and of
// its users.
package retrytest

import (
	"context"
	"sync"
	"time"
)

// Clock is a fake retry-loop clock: it stands still except in Sleep, which
// returns at once (or with ctx's error) and moves it forward by what it was
// asked to wait, and in Advance. It records the waits.
type Clock struct {
	mu    sync.Mutex // guards at and waits
	at    time.Time
	waits []time.Duration
}

// New returns a Clock that starts at start.
func New(start time.Time) *Clock { return &Clock{at: start} }

// Now reads c.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}

// Sleep records a wait of d and moves c forward by it.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waits = append(c.waits, d)
	c.at = c.at.Add(d)
	return nil
}

// Advance moves c forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = c.at.Add(d)
}

// Waits returns the waits asked of c so far.
func (c *Clock) Waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}
