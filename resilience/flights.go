package resilience

import (
	"errors"
	"runtime/debug"
	"sync"

	"golang.org/x/sync/singleflight"
)

// errFlightExited is the error of a shared load whose goroutine exited
// (runtime.Goexit) before it returned.
var errFlightExited = errors.New("resilience: shared load exited before it returned")

// flights is the pipeline's per-key single flight: what
// golang.org/x/sync/singleflight does for one key at a time, plus what a
// batch needs: to learn at once, without a goroutine per key, which keys
// it leads and which another caller is already loading, and to hear of
// the end of many flights through one channel. Get and GetMany share it,
// so each joins the other's loads.
type flights struct {
	mu sync.Mutex // guards m and every flight's chans and hooks
	m  map[string]*flight
}

// flight is one key's load in progress.
type flight struct {
	val   any
	err   error
	dups  int
	chans []chan<- singleflight.Result
	hooks []func(val any, err error)
}

// DoChan runs fn for key on a goroutine of its own unless a load of key
// is under way, and returns the channel its result arrives on.
func (g *flights) DoChan(key string, fn func() (any, error)) <-chan singleflight.Result {
	ch := make(chan singleflight.Result, 1)
	g.mu.Lock()
	if f, ok := g.m[key]; ok {
		f.dups++
		f.chans = append(f.chans, ch)
		g.mu.Unlock()
		return ch
	}
	f := g.newLocked(key)
	f.chans = append(f.chans, ch)
	g.mu.Unlock()
	go g.run(key, f, fn)
	return ch
}

// Do is DoChan that waits; shared reports whether others got the result
// too.
func (g *flights) Do(key string, fn func() (any, error)) (v any, err error, shared bool) {
	r := <-g.DoChan(key, fn)
	return r.Val, r.Err, r.Shared
}

// lead makes the caller the leader of key's load, which it ends with
// finish, unless a load of key is under way: then hook is called with
// that load's result when it ends, and lead returns false. hook must not
// block.
func (g *flights) lead(key string, hook func(val any, err error)) (*flight, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f, ok := g.m[key]; ok {
		f.dups++
		f.hooks = append(f.hooks, hook)
		return f, false
	}
	return g.newLocked(key), true
}

func (g *flights) newLocked(key string) *flight {
	if g.m == nil {
		g.m = make(map[string]*flight)
	}
	f := &flight{}
	g.m[key] = f
	return f
}

// run runs fn as key's load. A panic becomes a [*PanicError] for every
// caller, rather than a crash.
func (g *flights) run(key string, f *flight, fn func() (any, error)) {
	var val any
	err := errFlightExited
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Stage: "pipeline", Value: v, Stack: debug.Stack()}
		}
		g.finish(key, f, val, err)
	}()
	val, err = fn()
}

// finish ends key's load f with its result, for everyone who joined it.
func (g *flights) finish(key string, f *flight, val any, err error) {
	g.mu.Lock()
	if g.m[key] == f {
		delete(g.m, key)
	}
	f.val, f.err = val, err
	chans, hooks, shared := f.chans, f.hooks, f.dups > 0
	f.chans, f.hooks = nil, nil
	g.mu.Unlock()
	for _, ch := range chans {
		ch <- singleflight.Result{Val: val, Err: err, Shared: shared} // buffered: never blocks
	}
	for _, h := range hooks {
		h(val, err)
	}
}
