// Package bg is the one launch of a pipeline's background work (shared
// loads, refreshes, releases) and its count, which the pipeline's Close
// waits for: work that outlives the caller who started it, on the
// caller's values without its cancellation, under a deadline of its own.
package bg

import (
	"context"
	"sync"
	"time"
)

// How says how Launch runs a piece of background work: the differences
// between its callers (a shared load, a refresh, a release).
type How struct {
	// Timeout is the work's own deadline, from its launch.
	Timeout time.Duration
	// Inline runs the work on the caller's goroutine, which waits for it:
	// for a caller whose context cannot end, which never leaves early.
	Inline bool
	// Anyway runs the work even once the pipeline is closing, at once on
	// the caller's goroutine and uncounted: a release, which must not be
	// left behind.
	Anyway bool
	// First runs on the caller's goroutine, on the work's context, before
	// the work starts: a lease's watchdog, which must not wait for the
	// work's goroutine to be scheduled.
	First func(context.Context)
}

// Tasks counts a pipeline's background work (shared loads, refreshes,
// releases) so that Close can wait for it. Unlike a bare WaitGroup, it
// refuses new work once closing has begun, so Add never races with Wait.
// Its zero value, given Panicked, is ready to use.
type Tasks struct {
	// Panicked hears a panic of background work, with the work's context
	// and the recovered value: no caller is left to hear it.
	Panicked func(ctx context.Context, v any)

	mu     sync.Mutex // guards closed, and orders Add against Close
	closed bool
	wg     sync.WaitGroup
}

// Launch runs fn as background work: on ctx's values (its span) without
// its cancellation, so that it outlives a caller who leaves, under a
// deadline of its own, on a goroutine of its own, counted: Close waits
// for it. It is the only place that starts background work. (A caller
// that runs a load on its own goroutine and context counts it itself,
// with Add and Done.) Once closing has begun it runs nothing and returns
// false, unless how.Anyway.
func (t *Tasks) Launch(ctx context.Context, how How, fn func(context.Context)) bool {
	counted := t.Add()
	if !counted && !how.Anyway {
		return false
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), how.Timeout)
	if how.First != nil {
		how.First(ctx)
	}
	run := func() {
		defer cancel()
		// No caller is left to hear a panic of background work (a
		// backend's, in a release): it goes to Panicked, which logs it,
		// and the process goes on. The stages recover their own users'
		// panics before this.
		defer func() {
			if v := recover(); v != nil {
				t.Panicked(ctx, v)
			}
		}()
		fn(ctx)
	}
	if how.Inline || !counted {
		if counted {
			defer t.Done()
		}
		run()
		return true
	}
	go func() {
		defer t.Done()
		run()
	}()
	return true
}

// Add counts one task; it returns false once Close has begun.
func (t *Tasks) Add() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Add(1)
	return true
}

// Done ends a task that Add counted.
func (t *Tasks) Done() { t.wg.Done() }

// Close refuses new tasks and waits for the running ones.
func (t *Tasks) Close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.wg.Wait()
}
