package breaker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

var (
	// ErrOpen is returned by [Breaker.Allow] while the breaker is open.
	ErrOpen = errors.New("breaker: open")
	// ErrTooManyProbes is returned by [Breaker.Allow] while the breaker is
	// half-open and its probes are all in flight.
	ErrTooManyProbes = errors.New("breaker: half-open, probes in flight")
	// ErrSlowCall is what a call slower than Settings.SlowCall is recorded
	// as. The caller still gets the call's own result.
	ErrSlowCall = errors.New("breaker: slow call")
)

// State is a breaker's state.
type State int

const (
	// Closed lets every call through.
	Closed State = iota
	// HalfOpen lets a few probe calls through.
	HalfOpen
	// Open refuses every call.
	Open
)

// String returns "closed", "half-open" or "open".
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half-open"
	case Open:
		return "open"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Defaults of [Settings].
const (
	DefaultFailures       = 5
	DefaultOpenTimeout    = 30 * time.Second
	DefaultHalfOpenProbes = 1
	DefaultMinRequests    = 20
	DefaultWindow         = 10 * time.Second
)

// Settings configures a [Breaker]. The zero value is usable: each zero field
// takes the default it names.
type Settings struct {
	// Name identifies the breaker in callbacks, errors and telemetry.
	Name string
	// Failures is how many consecutive failures open the breaker, unless
	// FailureRatio is set.
	// default: 5
	Failures uint32
	// FailureRatio, when above 0, opens the breaker on a failure rate
	// instead of a run of failures: when at least FailureRatio of the
	// calls that finished in the last Window failed, and there were at
	// least MinRequests of them (calls whose outcome is ignored, see
	// [Ignore], count neither way). A handful of slow replies under a burst then
	// does not open it; a dependency that fails most calls does.
	// default: 0 (count consecutive failures)
	FailureRatio float64
	// MinRequests is the least number of calls in the Window for
	// FailureRatio to apply.
	// default: 20
	MinRequests uint32
	// Window is the rolling window over which FailureRatio is measured:
	// ten buckets of Window/10 (at least a millisecond) each.
	// default: 10 seconds
	Window time.Duration
	// OpenTimeout is how long the breaker stays open before it lets a
	// probe through.
	// default: 30 seconds
	OpenTimeout time.Duration
	// HalfOpenProbes is how many calls may run while half-open; that many
	// consecutive successes close the breaker.
	// default: 1
	HalfOpenProbes uint32
	// SlowCall, if positive, makes a call that takes longer than it count
	// as a failure even when it succeeds.
	// default: 0 (off)
	SlowCall time.Duration
	// IsFailure decides which errors count against the breaker.
	// default: every non-nil error except context.Canceled (a caller that
	// gave up says nothing about the dependency's health)
	IsFailure func(err error) bool
	// OnStateChange, if not nil, is called after each transition, outside
	// every lock of the breaker, in the order the transitions happened.
	OnStateChange func(name string, from, to State)
}

// Breaker is a circuit breaker. It is safe for concurrent use.
//
// A call through a closed breaker takes no lock and reads no clock unless
// it has to: the state lives in an immutable generation read atomically,
// a run of failures is an atomic counter, and the clock is read only for
// SlowCall, for the FailureRatio window, and while open. Transitions, the
// half-open probes and the FailureRatio window take a mutex.
type Breaker struct {
	name      string
	slow      time.Duration
	isFailure func(error) bool
	onChange  func(name string, from, to State)

	failures    uint32
	ratio       float64
	minRequests uint32
	bucket      time.Duration
	openTimeout time.Duration
	probes      uint32
	errOpen     error
	errProbes   error

	// cur is the current generation: a new one starts at every
	// transition, and an outcome reported for an older one is dropped.
	cur atomic.Pointer[generation]
	// queued is how many transitions wait in pending: the fast path
	// reads it instead of taking mu.
	queued atomic.Int32

	// mu guards transitions, the half-open and window counts of the
	// current generation, pending, dispatching and subs. Transitions are
	// queued under it and delivered by whichever goroutine finishes a
	// breaker call first, one dispatcher at a time, outside mu, so the
	// user sees them in order and may call back into the breaker.
	mu          sync.Mutex
	pending     []transition
	dispatching bool
	subs        map[*func(string, State, State)]struct{}
}

// generation is one stretch of a breaker's life in one state.
type generation struct {
	state State
	// until is when an open breaker lets a probe through.
	until time.Time
	// start is when the generation began: the origin of its window.
	start time.Time
	// done is [Breaker.Allow]'s callback for this generation, made once
	// so that Allow does not allocate.
	done func(err error, took time.Duration)

	// run is the current run of consecutive failures (closed).
	run atomic.Uint32

	// Under Breaker.mu: half-open probes admitted, finished without a
	// verdict, and succeeded; the closed window's buckets.
	probes, excluded, successes uint32
	window                      []bucket
}

// bucket counts the outcomes of one slice of the FailureRatio window.
type bucket struct {
	slice              int64
	requests, failures uint32
}

type transition struct{ from, to State }

// refusal is the error of a refused call: ErrOpen or ErrTooManyProbes,
// with the breaker's name. One is made per breaker, so refusing does not
// allocate.
type refusal struct {
	kind error
	name string
}

func (r *refusal) Error() string { return r.kind.Error() + " (" + r.name + ")" }
func (r *refusal) Unwrap() error { return r.kind }

// New returns a breaker configured by s. It returns an error for settings
// that make no sense.
func New(s Settings) (*Breaker, error) {
	if s.OpenTimeout < 0 {
		return nil, fmt.Errorf("breaker %q: OpenTimeout must not be negative, got %v", s.Name, s.OpenTimeout)
	}
	if s.SlowCall < 0 {
		return nil, fmt.Errorf("breaker %q: SlowCall must not be negative, got %v", s.Name, s.SlowCall)
	}
	if s.FailureRatio < 0 || s.FailureRatio > 1 || s.Window < 0 {
		return nil, fmt.Errorf("breaker %q: FailureRatio must be in [0, 1] and Window not negative, got %v and %v", s.Name, s.FailureRatio, s.Window)
	}
	if s.Failures == 0 {
		s.Failures = DefaultFailures
	}
	if s.OpenTimeout == 0 {
		s.OpenTimeout = DefaultOpenTimeout
	}
	if s.HalfOpenProbes == 0 {
		s.HalfOpenProbes = DefaultHalfOpenProbes
	}
	if s.MinRequests == 0 {
		s.MinRequests = DefaultMinRequests
	}
	if s.Window == 0 {
		s.Window = DefaultWindow
	}
	b := &Breaker{
		name: s.Name, slow: s.SlowCall, isFailure: s.IsFailure, onChange: s.OnStateChange,
		failures: s.Failures, ratio: s.FailureRatio, minRequests: s.MinRequests,
		bucket:      max(s.Window/windowBuckets, time.Millisecond),
		openTimeout: s.OpenTimeout, probes: s.HalfOpenProbes,
		errOpen:   &refusal{ErrOpen, s.Name},
		errProbes: &refusal{ErrTooManyProbes, s.Name},
	}
	if b.isFailure == nil {
		b.isFailure = defaultIsFailure
	}
	b.cur.Store(b.newGeneration(Closed, time.Now()))
	return b, nil
}

// windowBuckets is how many slices the FailureRatio window rolls by.
const windowBuckets = 10

func (b *Breaker) newGeneration(s State, now time.Time) *generation {
	g := &generation{state: s, start: now}
	switch s {
	case Open:
		g.until = now.Add(b.openTimeout)
	case Closed:
		if b.ratio > 0 {
			g.window = make([]bucket, windowBuckets)
		}
	}
	g.done = func(err error, took time.Duration) { b.record(g, err, took) }
	return g
}

// setState moves the breaker from g, the current generation, to s and
// queues the transition. b.mu must be held.
func (b *Breaker) setState(g *generation, s State, now time.Time) *generation {
	n := b.newGeneration(s, now)
	b.cur.Store(n)
	b.pending = append(b.pending, transition{g.state, s})
	b.queued.Add(1)
	return n
}

func defaultIsFailure(err error) bool { return err != nil && !errors.Is(err, context.Canceled) }

// Name returns the breaker's name.
func (b *Breaker) Name() string { return b.name }

// SlowCall returns Settings.SlowCall: above 0, the duration passed to done
// matters; at 0, done may be given 0 without reading a clock.
func (b *Breaker) SlowCall() time.Duration { return b.slow }

// State returns the current state. An open breaker whose OpenTimeout has
// passed is half-open.
func (b *Breaker) State() State {
	g := b.cur.Load()
	if g.state == Open && !time.Now().Before(g.until) {
		b.mu.Lock()
		if g = b.cur.Load(); g.state == Open {
			if now := time.Now(); !now.Before(g.until) {
				g = b.setState(g, HalfOpen, now)
			}
		}
		b.mu.Unlock()
	}
	b.dispatch()
	return g.state
}

// Allow asks to make one call. It returns [ErrOpen] or [ErrTooManyProbes]
// when the call must not be made; otherwise the caller must call done
// exactly once with the call's error and how long it took.
func (b *Breaker) Allow() (done func(err error, took time.Duration), err error) {
	g, err := b.allow()
	if err != nil {
		return nil, err
	}
	return g.done, nil
}

// allow admits one call and returns the generation its outcome belongs
// to. A closed breaker takes no lock and reads no clock.
func (b *Breaker) allow() (*generation, error) {
	g := b.cur.Load()
	switch {
	case g.state == Closed:
		return g, nil
	case g.state == Open && time.Now().Before(g.until):
		return nil, b.errOpen
	}
	b.mu.Lock()
	g = b.cur.Load()
	if g.state == Open {
		if now := time.Now(); !now.Before(g.until) {
			g = b.setState(g, HalfOpen, now)
		}
	}
	var err error
	switch g.state {
	case Open:
		err = b.errOpen
	case HalfOpen:
		if g.probes-g.excluded >= b.probes {
			err = b.errProbes
		} else {
			g.probes++
		}
	}
	b.mu.Unlock()
	b.dispatch()
	if err != nil {
		return nil, err
	}
	return g, nil
}

// Ignore, passed to done, records that the call ran but says nothing of the
// dependency's health (the caller gave up, say): it counts neither way.
var Ignore = errIgnored

var errIgnored = errors.New("breaker: ignored outcome")

var errPanicked = errors.New("breaker: call panicked")

// Execute runs fn if the breaker allows it and records its outcome. A
// panic in fn counts as a failure, then goes on.
func (b *Breaker) Execute(fn func() error) error {
	g, err := b.allow()
	if err != nil {
		return err
	}
	// The clock is read only when a slow-call threshold needs it.
	var start time.Time
	if b.slow > 0 {
		start = time.Now()
	}
	ok := false
	defer func() {
		if !ok { // fn panicked: a failure, then the panic goes on
			b.record(g, errPanicked, 0)
		}
	}()
	err = fn()
	ok = true
	var took time.Duration
	if b.slow > 0 {
		took = time.Since(start)
	}
	b.record(g, err, took)
	return err
}

// outcome is what a call says of the dependency.
type outcome uint8

const (
	success outcome = iota
	failure
	ignored
)

func (b *Breaker) classify(err error, took time.Duration) outcome {
	switch {
	case err == nil:
		if b.slow > 0 && took > b.slow {
			return failure
		}
		return success
	case errors.Is(err, errIgnored):
		return ignored
	case b.isFailure(err):
		return failure
	case errors.Is(err, context.Canceled):
		return ignored
	}
	return success
}

// record counts the outcome of a call admitted in generation g.
func (b *Breaker) record(g *generation, err error, took time.Duration) {
	o := b.classify(err, took)
	if b.cur.Load() != g {
		return // the breaker moved on since the call began
	}
	if g.state == Closed && b.ratio == 0 {
		// A run of failures: atomics only, no lock until it trips.
		switch o {
		case success:
			if g.run.Load() != 0 {
				g.run.Store(0)
			}
		case failure:
			if g.run.Add(1) >= b.failures {
				b.mu.Lock()
				if b.cur.Load() == g {
					b.setState(g, Open, time.Now())
				}
				b.mu.Unlock()
			}
		}
	} else if o != ignored || g.state == HalfOpen {
		b.mu.Lock()
		if b.cur.Load() == g {
			b.recordLocked(g, o)
		}
		b.mu.Unlock()
	}
	b.dispatch()
}

// recordLocked counts an outcome of the current generation g in the
// window (closed, FailureRatio) or among the probes (half-open).
func (b *Breaker) recordLocked(g *generation, o outcome) {
	now := time.Now()
	switch g.state {
	case HalfOpen:
		switch o {
		case ignored:
			g.excluded++
		case failure:
			b.setState(g, Open, now)
		case success:
			if g.successes++; g.successes >= b.probes {
				b.setState(g, Closed, now)
			}
		}
	case Closed:
		slice := int64(now.Sub(g.start) / b.bucket)
		w := &g.window[slice%windowBuckets]
		if w.slice != slice {
			*w = bucket{slice: slice}
		}
		w.requests++
		if o != failure {
			return
		}
		w.failures++
		var requests, failures uint32
		for _, w := range g.window {
			if w.slice > slice-windowBuckets {
				requests += w.requests
				failures += w.failures
			}
		}
		if requests >= b.minRequests && float64(failures) >= b.ratio*float64(requests) {
			b.setState(g, Open, now)
		}
	}
}

// dispatch delivers queued transitions to OnStateChange and the
// subscribers, outside b.mu. Without a queued transition it takes no lock.
func (b *Breaker) dispatch() {
	if b.queued.Load() == 0 {
		return
	}
	b.mu.Lock()
	if b.dispatching || len(b.pending) == 0 {
		b.mu.Unlock()
		return
	}
	b.dispatching = true
	for len(b.pending) > 0 {
		batch := b.pending
		b.pending = nil
		b.queued.Add(-int32(len(batch)))
		subs := make([]func(string, State, State), 0, len(b.subs))
		for fn := range b.subs {
			subs = append(subs, *fn)
		}
		b.mu.Unlock()
		for _, t := range batch {
			if b.onChange != nil {
				b.onChange(b.name, t.from, t.to)
			}
			for _, fn := range subs {
				fn(b.name, t.from, t.to)
			}
		}
		b.mu.Lock()
	}
	b.dispatching = false
	b.mu.Unlock()
}

// Subscribe adds fn to the callbacks of every later transition, called
// like Settings.OnStateChange (after it, outside every lock of the
// breaker), and returns the function that removes it. Several users of
// one shared breaker (pipelines on one Redis client, say) each subscribe,
// and unsubscribe when done, so that nothing they own outlives them.
func (b *Breaker) Subscribe(fn func(name string, from, to State)) (unsubscribe func()) {
	if fn == nil {
		return func() {}
	}
	h := &fn
	b.mu.Lock()
	if b.subs == nil {
		b.subs = make(map[*func(string, State, State)]struct{})
	}
	b.subs[h] = struct{}{}
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		delete(b.subs, h)
		b.mu.Unlock()
	}
}
