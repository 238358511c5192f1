package redistest

import (
	"io"
	"sync"
	"testing"
)

// clients are the clients a server or topology handed out; its close
// closes them. Its methods are safe for concurrent use.
type clients[C io.Closer] struct {
	mu     sync.Mutex // guards list and closed
	list   []C
	closed bool
}

// add keeps c for closing, or closes it at once when the clients are
// already closed, and returns it.
func (cs *clients[C]) add(c C) C {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closed {
		_ = c.Close()
		return c
	}
	cs.list = append(cs.list, c)
	return c
}

// close closes every client kept, and every one added from now on.
func (cs *clients[C]) close() {
	cs.mu.Lock()
	cs.closed = true
	list := cs.list
	cs.list = nil
	cs.mu.Unlock()
	for _, c := range list {
		_ = c.Close()
	}
}

// start makes a server or topology with newFn for one test and registers
// its cleanup with tb, which logs report(v) (its logs) if the test failed.
// It fails tb if newFn does.
func start[T any](tb testing.TB, newFn func() (T, func(), error), report func(T) string) T {
	tb.Helper()
	v, closeFn, err := newFn()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Log(report(v))
		}
		closeFn()
	})
	return v
}
