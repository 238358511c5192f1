package breaker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

var (
	// ErrOpen is returned by [Breaker.Execute] while the breaker is open.
	ErrOpen = errors.New("breaker: open")
	// ErrTooManyProbes is returned by [Breaker.Execute] while the breaker
	// is half-open and its probes are all in flight.
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
	// calls that began in the last Window and have finished failed, and
	// there were at least MinRequests of them (calls whose outcome is
	// ignored, see [Ignore], count neither way). A handful of slow replies
	// under a burst then does not open it; a dependency that fails most
	// calls does.
	// default: 0 (count consecutive failures)
	FailureRatio float64
	// MinRequests is the least number of calls in the Window for
	// FailureRatio to apply.
	// default: 20
	MinRequests uint32
	// Window is the rolling window over which FailureRatio is measured:
	// ten buckets of Window/10 (at least a millisecond) each. A call's
	// outcome counts in the bucket of when the call began; the outcome of
	// a call that began before the window is dropped.
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
	// IsFailure decides which errors count against the breaker. It is
	// called outside every lock of the breaker.
	// default: every non-nil error except context.Canceled (a caller that
	// gave up says nothing about the dependency's health)
	IsFailure func(err error) bool
	// OnStateChange, if not nil, is called after each transition, outside
	// every lock of the breaker, in the order the transitions happened.
	OnStateChange func(name string, from, to State)
}

// Breaker is a circuit breaker. It is safe for concurrent use.
//
// It runs on a [gobreaker.CircuitBreaker]: gobreaker keeps the state, the
// counts and the rolling window, and takes its mutex twice per call; the
// Breaker classifies each outcome before gobreaker sees it (outside that
// mutex) and delivers transitions outside every lock.
type Breaker struct {
	name      string
	slow      time.Duration
	isFailure func(error) bool
	onChange  func(name string, from, to State)
	cb        *gobreaker.CircuitBreaker[struct{}]
	errOpen   error
	errProbes error

	// queued is how many transitions wait in pending: a call reads it
	// instead of taking mu.
	queued atomic.Int32

	// mu guards pending, dispatching and subs. Transitions are queued by
	// gobreaker's OnStateChange, which runs under gobreaker's mutex (so mu
	// is only ever taken inside it, never the other way round), and
	// delivered by whichever goroutine finishes a breaker call first, one
	// dispatcher at a time, outside every lock, so the user sees them in
	// order and may call back into the breaker.
	mu          sync.Mutex
	pending     []transition
	dispatching bool
	subs        map[*func(string, State, State)]struct{}
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
		errOpen:   &refusal{ErrOpen, s.Name},
		errProbes: &refusal{ErrTooManyProbes, s.Name},
	}
	if b.isFailure == nil {
		b.isFailure = defaultIsFailure
	}
	gs := gobreaker.Settings{
		Name:        s.Name,
		MaxRequests: s.HalfOpenProbes,
		Timeout:     s.OpenTimeout,
		// Execute hands gobreaker a verdict, not the call's error: nil
		// for a success, errIgnored for an outcome that counts neither
		// way, anything else for a failure (ErrSlowCall for a slow
		// success, the error of a panic).
		IsSuccessful:  func(err error) bool { return err == nil },
		IsExcluded:    func(err error) bool { return err == errIgnored },
		OnStateChange: b.queue,
	}
	if ratio, least := s.FailureRatio, s.MinRequests; ratio > 0 {
		gs.Interval = s.Window
		gs.BucketPeriod = max(s.Window/windowBuckets, time.Millisecond)
		gs.ReadyToTrip = func(c gobreaker.Counts) bool {
			// Requests counts calls in flight and ignored ones too: the
			// rate is over the calls that finished with a verdict.
			n := c.TotalSuccesses + c.TotalFailures
			return n >= least && float64(c.TotalFailures) >= ratio*float64(n)
		}
	} else {
		failures := s.Failures
		gs.ReadyToTrip = func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures }
	}
	b.cb = gobreaker.NewCircuitBreaker[struct{}](gs)
	return b, nil
}

// windowBuckets is how many slices the FailureRatio window rolls by.
const windowBuckets = 10

func defaultIsFailure(err error) bool { return err != nil && !errors.Is(err, context.Canceled) }

// queue is gobreaker's OnStateChange. It runs under gobreaker's mutex:
// it only queues the transition, and calls nothing of the user's.
func (b *Breaker) queue(_ string, from, to gobreaker.State) {
	b.mu.Lock()
	b.pending = append(b.pending, transition{fromGo(from), fromGo(to)})
	b.queued.Add(1)
	b.mu.Unlock()
}

func fromGo(s gobreaker.State) State {
	switch s {
	case gobreaker.StateHalfOpen:
		return HalfOpen
	case gobreaker.StateOpen:
		return Open
	}
	return Closed
}

// Name returns the breaker's name.
func (b *Breaker) Name() string { return b.name }

// State returns the current state. An open breaker whose OpenTimeout has
// passed is half-open.
func (b *Breaker) State() State {
	s := fromGo(b.cb.State())
	b.dispatch()
	return s
}

// Ignore, returned by the function given to [Breaker.Execute] (or wrapped
// in its error), records that the call ran but says nothing of the
// dependency's health (the caller gave up, say): it counts neither way.
var Ignore = errIgnored

var errIgnored = errors.New("breaker: ignored outcome")

// Execute runs fn if the breaker allows it, records its outcome and
// returns fn's error as it is. It returns an error matching [ErrOpen] or
// [ErrTooManyProbes], without running fn, when the call must not be made.
//
// fn's error says how the call counts: nil is a success (a failure if
// it took longer than Settings.SlowCall), an error wrapping [Ignore]
// counts neither way, and any other error counts as Settings.IsFailure
// says. A caller whose result is not a plain error keeps it in variables
// that fn sets, and returns from fn what the breaker should record. A
// panic in fn counts as a failure, then goes on.
//
// Execute allocates nothing unless fn's closure escapes by itself: the
// closure it hands gobreaker stays on the stack.
func (b *Breaker) Execute(fn func() error) error {
	ran := false
	var err error
	defer b.dispatch()
	_, refused := b.cb.Execute(func() (struct{}, error) {
		ran = true
		if b.slow <= 0 {
			err = fn()
			return struct{}{}, b.verdict(err)
		}
		// The clock is read only when a slow-call threshold needs it.
		start := time.Now()
		err = fn()
		if err == nil && time.Since(start) > b.slow {
			return struct{}{}, ErrSlowCall
		}
		return struct{}{}, b.verdict(err)
	})
	if !ran {
		if refused == gobreaker.ErrOpenState {
			return b.errOpen
		}
		return b.errProbes
	}
	return err
}

// verdict is what gobreaker records of a call that ended with err: nil
// (success), errIgnored, or a failure. It runs outside gobreaker's mutex,
// so IsFailure may call back into the breaker.
func (b *Breaker) verdict(err error) error {
	switch {
	case err == nil:
		return nil
	case err == errIgnored || errors.Is(err, errIgnored):
		return errIgnored
	case b.isFailure(err):
		return err
	case errors.Is(err, context.Canceled):
		return errIgnored
	}
	return nil
}

// dispatch delivers queued transitions to OnStateChange and the
// subscribers, outside every lock. Without a queued transition it takes
// no lock.
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
