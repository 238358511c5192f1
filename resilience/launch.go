package resilience

import (
	"context"
	"sync"
	"time"
)

// launching says how launch runs a piece of background work: the
// differences between its callers (a shared load, a refresh, a release).
type launching struct {
	// timeout is the work's own deadline, from its launch.
	timeout time.Duration
	// inline runs the work on the caller's goroutine, which waits for it:
	// for a caller whose context cannot end, which never leaves early.
	inline bool
	// anyway runs the work even once the pipeline is closing, at once on
	// the caller's goroutine and uncounted: a release, which must not be
	// left behind.
	anyway bool
	// first runs on the caller's goroutine, on the work's context, before
	// the work starts: a lease's watchdog, which must not wait for the
	// work's goroutine to be scheduled.
	first func(context.Context)
}

// launch runs fn as background work: on ctx's values (its span) without
// its cancellation, so that it outlives a caller who leaves, under a
// deadline of its own, on a goroutine of its own, counted in p.bg: Close
// waits for it. It is the only place that starts background work. (A
// caller that runs a load on its own goroutine and context, fetchAlone or
// missMany, counts it in p.bg itself.) Once the pipeline is closing it
// runs nothing and returns false, unless how.anyway.
func (p *Pipeline[V]) launch(ctx context.Context, how launching, fn func(context.Context)) bool {
	counted := p.bg.add()
	if !counted && !how.anyway {
		return false
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), how.timeout)
	if how.first != nil {
		how.first(ctx)
	}
	run := func() {
		defer cancel()
		// No caller is left to hear a panic of background work (a
		// backend's, in a release): it is logged, and the process goes
		// on. The stages recover their own users' panics before this.
		defer func() {
			if v := recover(); v != nil {
				p.logs.panicked(ctx, panicked("pipeline", v))
			}
		}()
		fn(ctx)
	}
	if how.inline || !counted {
		if counted {
			defer p.bg.done()
		}
		run()
		return true
	}
	go func() {
		defer p.bg.done()
		run()
	}()
	return true
}

// tasks counts a pipeline's background work (shared loads, refreshes,
// releases) so that Close can wait for it. Unlike a bare WaitGroup, it
// refuses new work once closing has begun, so Add never races with Wait.
type tasks struct {
	mu     sync.Mutex // guards closed, and orders add against close
	closed bool
	wg     sync.WaitGroup
}

// add counts one task; it returns false once close has begun.
func (t *tasks) add() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Add(1)
	return true
}

func (t *tasks) done() { t.wg.Done() }

// close refuses new tasks and waits for the running ones.
func (t *tasks) close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.wg.Wait()
}
