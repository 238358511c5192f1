// Package flight runs one shared load per key in a process: the
// pipeline's single-flight stage.
//
// It takes the place of golang.org/x/sync/singleflight, whose Do holds
// every joiner until the load ends, whatever its context says, and whose
// DoChan, which lets a joiner leave, runs each leader on a goroutine of
// its own: an L2 hit then paid a goroutine, a hand-off between
// goroutines and a context of its own. Here the leader keeps its own
// goroutine (package resilience runs a look that finds the value on it,
// and only a load on a goroutine of its own), and a joiner waits on a
// channel it may leave at any time: a [Group] decides who leads a key's
// flight, and [Call.Done] tells its joiners when it ended. A batch leads
// and joins its keys' flights at once ([Group.LeadMany]), and ends those
// it leads together ([Batch.End]), without a goroutine per key.
package flight

import (
	"errors"
	"sync"
)

// ErrExited is the error a flight ends with when the function that ran it
// exited before it returned: it called runtime.Goexit, or panicked. The
// flight's joiners get it; package resilience returns it as the error of
// a shared load that exited.
var ErrExited = errors.New("resilience: shared load exited before it returned")

// Group holds the flights under way, by key. Its zero value is ready for
// use; it is safe for concurrent use. T is what a leader fills in its
// flight ([Call.Outcome]), which the flight's value may point at. A nil
// *Group shares nothing: [Group.Do] runs its function alone and
// [Group.LeadMany] leads every key; its other methods need a Group.
type Group[T any] struct {
	mu sync.Mutex // guards m and each flight's done and hooks
	m  map[string]*Call[T]
}

// Call is one shared load.
type Call[T any] struct {
	o    T             // the leader's outcome, which val may point at
	val  any           // set before done is closed
	err  error         // set before done is closed
	done chan struct{} // made by the first caller that waits; closed at the end
	// hooks hear the result of a flight that a batch joined (see Lead).
	hooks []func(val any, err error)
}

// Outcome is where f's leader keeps what it finds, so that the flight's
// value can point at it without an allocation of its own.
func (f *Call[T]) Outcome() *T { return &f.o }

// Done is closed once f has ended. It is nil unless the caller got f from
// [Group.Join] as a joiner, from [Group.Underway], or made it with
// [Group.Waitable].
func (f *Call[T]) Done() chan struct{} { return f.done }

// Result is the value and error that f ended with; valid once Done is
// closed.
func (f *Call[T]) Result() (any, error) { return f.val, f.err }

// Join returns key's flight under way, and true, or starts one, and false:
// the caller leads it and must end it.
func (g *Group[T]) Join(key string) (*Call[T], bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f, ok := g.m[key]; ok {
		if f.done == nil {
			f.done = make(chan struct{})
		}
		return f, true
	}
	if g.m == nil {
		g.m = make(map[string]*Call[T])
	}
	f := &Call[T]{}
	g.m[key] = f
	return f, false
}

// Underway returns key's flight if one is under way, ready to wait on, and
// nil if none is.
func (g *Group[T]) Underway(key string) *Call[T] {
	g.mu.Lock()
	defer g.mu.Unlock()
	f := g.m[key]
	if f != nil && f.done == nil {
		f.done = make(chan struct{})
	}
	return f
}

// Waited reports whether a caller waits for key's flight under way (its
// Done channel was asked for).
func (g *Group[T]) Waited(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	f := g.m[key]
	return f != nil && f.done != nil
}

// Waitable returns f's done channel, making it if nobody has.
func (g *Group[T]) Waitable(f *Call[T]) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f.done == nil {
		f.done = make(chan struct{})
	}
	return f.done
}

// End records f's result, takes f off key, and wakes whoever waits for it;
// then it runs f's hooks (see Lead).
func (g *Group[T]) End(key string, f *Call[T], val any, err error) {
	g.mu.Lock()
	f.val, f.err = val, err
	if g.m[key] == f {
		delete(g.m, key)
	}
	done, hooks := f.done, f.hooks
	f.hooks = nil
	g.mu.Unlock()
	if done != nil {
		close(done)
	}
	for _, h := range hooks {
		h(val, err)
	}
}

// Lead makes the caller the leader of key's flight, which it ends with
// End, unless a flight of key is under way: then hook hears that flight's
// result when it ends, and Lead returns false. A batch learns this way,
// without a goroutine per key, which keys it loads and which it joins.
// hook must not block.
func (g *Group[T]) Lead(key string, hook func(val any, err error)) (*Call[T], bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f, ok := g.m[key]; ok {
		f.hooks = append(f.hooks, hook)
		return f, false
	}
	if g.m == nil {
		g.m = make(map[string]*Call[T])
	}
	f := &Call[T]{}
	g.m[key] = f
	return f, true
}

// LeadMany is Lead for a batch's keys, without a goroutine per key: the
// Batch it returns leads each key with no flight under way, and the
// batch joins the flights under way of the others. Each key's result
// goes to hear once: a joined key's when its flight ends, with joined set
// (hear must then not block), a led key's when the batch ends it (see
// [Batch.End]).
func (g *Group[T]) LeadMany(keys []string, hear func(key string, val any, err error, joined bool)) *Batch[T] {
	b := &Batch[T]{g: g, hear: hear}
	if g == nil {
		b.keys = keys
		return b
	}
	for _, k := range keys {
		f, mine := g.Lead(k, func(val any, err error) { hear(k, val, err, true) })
		if mine {
			b.keys = append(b.keys, k)
			b.calls = append(b.calls, f)
		}
	}
	return b
}

// Batch is the flights that a batch leads (see [Group.LeadMany]), which
// it ends together, once its one shared load has answered their keys.
type Batch[T any] struct {
	g     *Group[T]
	keys  []string   // the keys the batch leads, in LeadMany's order
	calls []*Call[T] // calls[i] is keys[i]'s flight; none on a nil Group
	hear  func(key string, val any, err error, joined bool)
}

// Keys returns the keys b leads, in the order LeadMany was given them.
func (b *Batch[T]) Keys() []string { return b.keys }

// End ends the flight of each key b leads with the value and error that
// result gives for it, which the flight's joiners hear first, then b's
// hear.
func (b *Batch[T]) End(result func(key string) (any, error)) {
	for i, k := range b.keys {
		val, err := result(k)
		if b.calls != nil {
			b.g.End(k, b.calls[i], val, err)
		}
		b.hear(k, val, err, false)
	}
}

// Do runs fn as key's flight, or waits for the flight under way and
// returns its result, with shared set: singleflight's Do. A flight whose
// fn exits before it returns (runtime.Goexit, or a panic, which goes on
// up) ends with [ErrExited]. On a nil Group, Do runs fn alone.
func (g *Group[T]) Do(key string, fn func() (any, error)) (v any, err error, shared bool) {
	if g == nil {
		v, err = fn()
		return v, err, false
	}
	f, joined := g.Join(key)
	if joined {
		<-f.done
		return f.val, f.err, true
	}
	v, err = g.Run(key, f, fn)
	return v, err, false
}

// Run runs fn as the load of f, key's flight, which the caller leads,
// and ends f with what fn returns; a flight whose fn exits before it
// returns (runtime.Goexit, or a panic, which goes on up) ends with
// [ErrExited], so that its key's callers never wait for it forever.
func (g *Group[T]) Run(key string, f *Call[T], fn func() (any, error)) (v any, err error) {
	returned := false
	defer func() {
		if !returned {
			v, err = nil, ErrExited
		}
		g.End(key, f, v, err)
	}()
	v, err = fn()
	returned = true
	return v, err
}

// Run runs fn, the batch's load, and ends b's flights with the result it
// gives for each key (see [Batch.End]); when fn exits before it returns
// (runtime.Goexit, or a panic, which goes on up), each with [ErrExited].
func (b *Batch[T]) Run(fn func() (result func(key string) (any, error))) {
	result := func(string) (any, error) { return nil, ErrExited }
	defer func() { b.End(result) }()
	result = fn()
}
