package breaker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
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
	// calls in the last Window failed, and there were at least
	// MinRequests of them. A handful of slow replies under a burst then
	// does not open it; a dependency that fails most calls does.
	// default: 0 (count consecutive failures)
	FailureRatio float64
	// MinRequests is the least number of calls in the Window for
	// FailureRatio to apply.
	// default: 20
	MinRequests uint32
	// Window is the rolling window (ten buckets) over which FailureRatio
	// is measured.
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
type Breaker struct {
	name      string
	slow      time.Duration
	isFailure func(error) bool
	onChange  func(name string, from, to State)
	cb        *gobreaker.TwoStepCircuitBreaker[struct{}]

	// mu guards pending and dispatching. Transitions are queued by
	// gobreaker's callback (which runs under gobreaker's own mutex) and
	// delivered by whichever goroutine finishes a breaker call first, one
	// dispatcher at a time so the user sees them in order.
	mu          sync.Mutex
	pending     []transition
	dispatching bool
	subs        map[*func(string, State, State)]struct{}
}

type transition struct{ from, to State }

// New returns a breaker configured by s. It returns an error for settings
// that make no sense.
func New(s Settings) (*Breaker, error) {
	if s.OpenTimeout < 0 {
		return nil, fmt.Errorf("breaker %q: OpenTimeout must not be negative, got %v", s.Name, s.OpenTimeout)
	}
	if s.SlowCall < 0 {
		return nil, fmt.Errorf("breaker %q: SlowCall must not be negative, got %v", s.Name, s.SlowCall)
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
	if s.FailureRatio < 0 || s.FailureRatio > 1 || s.Window < 0 {
		return nil, fmt.Errorf("breaker %q: FailureRatio must be in [0, 1] and Window not negative, got %v and %v", s.Name, s.FailureRatio, s.Window)
	}
	if s.MinRequests == 0 {
		s.MinRequests = 20
	}
	if s.Window == 0 {
		s.Window = 10 * time.Second
	}
	b := &Breaker{name: s.Name, slow: s.SlowCall, isFailure: s.IsFailure, onChange: s.OnStateChange}
	if b.isFailure == nil {
		b.isFailure = defaultIsFailure
	}
	failures := s.Failures
	trip := func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures }
	var interval, bucket time.Duration
	if ratio, least := s.FailureRatio, s.MinRequests; ratio > 0 {
		trip = func(c gobreaker.Counts) bool {
			return c.Requests >= least && float64(c.TotalFailures) >= ratio*float64(c.Requests)
		}
		interval, bucket = s.Window, max(s.Window/10, time.Millisecond)
	}
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:         s.Name,
		MaxRequests:  s.HalfOpenProbes,
		Timeout:      s.OpenTimeout,
		Interval:     interval,
		BucketPeriod: bucket,
		ReadyToTrip:  trip,
		// errIgnored marks outcomes that must not count either way.
		IsExcluded:   func(err error) bool { return errors.Is(err, errIgnored) },
		IsSuccessful: func(err error) bool { return err == nil },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			// Runs under gobreaker's mutex: only queue, never call out.
			b.mu.Lock()
			b.pending = append(b.pending, transition{fromGo(from), fromGo(to)})
			b.mu.Unlock()
		},
	})
	return b, nil
}

var errIgnored = errors.New("breaker: ignored outcome")

func defaultIsFailure(err error) bool { return err != nil && !errors.Is(err, context.Canceled) }

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

// State returns the current state.
func (b *Breaker) State() State {
	s := fromGo(b.cb.State())
	b.dispatch()
	return s
}

// Allow asks to make one call. It returns [ErrOpen] or [ErrTooManyProbes]
// when the call must not be made; otherwise the caller must call done
// exactly once with the call's error and how long it took.
func (b *Breaker) Allow() (done func(err error, took time.Duration), err error) {
	d, err := b.cb.Allow()
	if err != nil {
		b.dispatch()
		if errors.Is(err, gobreaker.ErrOpenState) {
			return nil, fmt.Errorf("%w (%s)", ErrOpen, b.name)
		}
		return nil, fmt.Errorf("%w (%s)", ErrTooManyProbes, b.name)
	}
	return func(err error, took time.Duration) {
		d(b.classify(err, took))
		b.dispatch()
	}, nil
}

// Ignore, passed to done, records that the call ran but says nothing of the
// dependency's health (the caller gave up, say): it counts neither way.
var Ignore = errIgnored

// Execute runs fn if the breaker allows it and records its outcome.
func (b *Breaker) Execute(fn func() error) error {
	done, err := b.Allow()
	if err != nil {
		return err
	}
	// The clock is read only when a slow-call threshold needs it.
	var start time.Time
	if b.slow > 0 {
		start = time.Now()
	}
	took := func() time.Duration {
		if b.slow > 0 {
			return time.Since(start)
		}
		return 0
	}
	ok := false
	defer func() {
		if !ok { // fn panicked: a failure, then the panic goes on
			done(errors.New("breaker: call panicked"), took())
		}
	}()
	err = fn()
	ok = true
	done(err, took())
	return err
}

func (b *Breaker) classify(err error, took time.Duration) error {
	switch {
	case errors.Is(err, errIgnored):
		return err
	case err != nil:
		if b.isFailure(err) {
			return err
		}
		if errors.Is(err, context.Canceled) {
			return errIgnored
		}
		return nil
	case b.slow > 0 && took > b.slow:
		return ErrSlowCall
	}
	return nil
}

// dispatch delivers queued transitions to OnStateChange, outside gobreaker's
// lock and outside b.mu.
func (b *Breaker) dispatch() {
	b.mu.Lock()
	if b.dispatching || len(b.pending) == 0 {
		b.mu.Unlock()
		return
	}
	b.dispatching = true
	for len(b.pending) > 0 {
		batch := b.pending
		b.pending = nil
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
