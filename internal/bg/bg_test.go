package bg

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// tasks returns Tasks whose Panicked fails the test.
func tasks(t *testing.T) *Tasks {
	return &Tasks{Panicked: func(_ context.Context, v any) { t.Errorf("background work panicked: %v", v) }}
}

// TestLaunch_runsOnItsOwnGoroutineAndCloseWaits: a launch returns while
// its work runs, and Close waits for the work to end.
func TestLaunch_runsOnItsOwnGoroutineAndCloseWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := tasks(t)
		release, ended := make(chan struct{}), make(chan struct{})
		if !ts.Launch(t.Context(), How{Timeout: time.Minute}, func(context.Context) { <-release; close(ended) }) {
			t.Fatal("Launch refused work before Close")
		}
		closed := make(chan struct{})
		go func() { ts.Close(); close(closed) }()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned while the work runs")
		default:
		}
		close(release)
		<-closed
		select {
		case <-ended:
		default:
			t.Error("Close returned before the work ended")
		}
	})
}

// TestClose_refusesNewWork: once Close has begun, Launch runs nothing and
// returns false, and Add counts nothing, while Close still waits for the
// work under way.
func TestClose_refusesNewWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := tasks(t)
		release := make(chan struct{})
		ts.Launch(t.Context(), How{Timeout: time.Minute}, func(context.Context) { <-release })
		closed := make(chan struct{})
		go func() { ts.Close(); close(closed) }()
		synctest.Wait() // Close waits for the work
		late := make(chan struct{}, 1)
		if ts.Launch(t.Context(), How{Timeout: time.Minute}, func(context.Context) { late <- struct{}{} }) {
			t.Error("Launch took work after Close")
		}
		if ts.Add() {
			t.Error("Add counted a task after Close")
			ts.Done()
		}
		close(release)
		<-closed
		select {
		case <-late:
			t.Error("work launched after Close ran")
		default:
		}
	})
}

// TestLaunch_anywayRunsWhenClosing: work launched anyway runs even once
// closing has begun: at once, on the caller's goroutine, uncounted (Close
// has returned).
func TestLaunch_anywayRunsWhenClosing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := tasks(t)
		ts.Close()
		ran := false
		if !ts.Launch(t.Context(), How{Timeout: time.Minute, Anyway: true}, func(context.Context) { ran = true }) {
			t.Error("Launch refused work launched anyway")
		}
		if !ran {
			t.Error("work launched anyway did not run before Launch returned")
		}
	})
}

// TestLaunch_inlineRunsOnTheCaller: inline work runs on the caller's
// goroutine, which waits for it, and is counted: Close waits for it too.
func TestLaunch_inlineRunsOnTheCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := tasks(t)
		release, returned := make(chan struct{}), make(chan struct{})
		go func() {
			ts.Launch(t.Context(), How{Timeout: time.Minute, Inline: true}, func(context.Context) { <-release })
			close(returned)
		}()
		synctest.Wait()
		select {
		case <-returned:
			t.Fatal("Launch returned before its inline work ended")
		default:
		}
		closed := make(chan struct{})
		go func() { ts.Close(); close(closed) }()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned while inline work runs")
		default:
		}
		close(release)
		<-returned
		<-closed
	})
}

// TestLaunch_firstRunsBeforeTheWork: First runs on the caller's
// goroutine, before Launch returns and before the work, on the work's
// own context.
func TestLaunch_firstRunsBeforeTheWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := tasks(t)
		var firstCtx context.Context
		release, ended := make(chan struct{}), make(chan struct{})
		ts.Launch(t.Context(), How{Timeout: time.Minute, First: func(ctx context.Context) { firstCtx = ctx }}, func(ctx context.Context) {
			<-release
			if firstCtx != ctx {
				t.Error("First ran on another context than the work's, or not before it")
			}
			close(ended)
		})
		if firstCtx == nil {
			t.Error("First had not run when Launch returned")
		}
		close(release)
		<-ended
		ts.Close()
	})
}

// TestLaunch_panicReachesPanicked: a panic of background work goes to
// Panicked, with the work's context (the caller's values), and neither
// ends the process nor keeps Close waiting.
func TestLaunch_panicReachesPanicked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type key struct{}
		var got any
		var gotCtx context.Context
		ts := &Tasks{Panicked: func(ctx context.Context, v any) { got, gotCtx = v, ctx }}
		ctx := context.WithValue(t.Context(), key{}, "caller's")
		ts.Launch(ctx, How{Timeout: time.Minute}, func(context.Context) { panic("boom") })
		ts.Close()
		if got != "boom" {
			t.Fatalf("Panicked got %v; want boom", got)
		}
		if v := gotCtx.Value(key{}); v != "caller's" {
			t.Errorf("Panicked's context holds %v; want the caller's values", v)
		}
	})
}

// TestLaunch_ownDeadlineNotTheCallers: the work runs under its own
// deadline, Timeout from its launch, on the caller's values but not its
// cancellation, and its context ends once it returns.
func TestLaunch_ownDeadlineNotTheCallers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type key struct{}
		ts := tasks(t)
		parent, cancel := context.WithTimeout(context.WithValue(t.Context(), key{}, "caller's"), time.Second)
		const timeout = 5 * time.Second
		launched := time.Now()
		release := make(chan struct{})
		var workCtx context.Context
		ts.Launch(parent, How{Timeout: timeout}, func(ctx context.Context) {
			workCtx = ctx
			<-release
			if err := ctx.Err(); err != nil {
				t.Errorf("the work's context ended with its caller's: %v", err)
			}
			if d, ok := ctx.Deadline(); !ok || !d.Equal(launched.Add(timeout)) {
				t.Errorf("the work's deadline is %v (%v); want %v", d, ok, launched.Add(timeout))
			}
			if v := ctx.Value(key{}); v != "caller's" {
				t.Errorf("the work's context holds %v; want the caller's values", v)
			}
		})
		cancel()
		close(release)
		ts.Close()
		if workCtx.Err() == nil {
			t.Error("the work's context lives on after the work")
		}
	})
}
