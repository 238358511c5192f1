package breaker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errDown = errors.New("dependency down")

// recorder collects transitions as "from>to".
type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) on(_ string, from, to State) {
	r.mu.Lock()
	r.got = append(r.got, from.String()+">"+to.String())
	r.mu.Unlock()
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.got, ",")
}

func mustNew(t *testing.T, s Settings) *Breaker {
	t.Helper()
	b, err := New(s)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b
}

// call makes one call through b that ends with err after at least took.
// It returns b's refusal, or nil when the call ran.
func call(b *Breaker, err error, took time.Duration) error {
	ran := false
	berr := b.Execute(func() error {
		ran = true
		if took > 0 {
			time.Sleep(took)
		}
		return err
	})
	if ran {
		return nil
	}
	return berr
}

// begin starts a call through b on a goroutine of its own and returns once
// b has admitted it (or refused it: then it returns the refusal). The call
// runs until finish is called with the error it ends with; finish returns
// when Execute has.
func begin(t *testing.T, b *Breaker) (finish func(err error), refused error) {
	t.Helper()
	admitted := make(chan struct{})
	outcome := make(chan error)
	ended := make(chan error, 1)
	go func() {
		ended <- b.Execute(func() error {
			close(admitted)
			return <-outcome
		})
	}()
	select {
	case <-admitted:
		return func(err error) {
			outcome <- err
			if got := <-ended; got != err {
				t.Errorf("Execute returned %v, want fn's own %v", got, err)
			}
		}, nil
	case err := <-ended:
		return nil, err
	}
}

func TestNew_rejectsNegativeDurations(t *testing.T) {
	cases := []struct {
		name string
		s    Settings
		want string
	}{
		{"open timeout", Settings{Name: "x", OpenTimeout: -time.Second}, "OpenTimeout"},
		{"slow call", Settings{Name: "x", SlowCall: -time.Second}, "SlowCall"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.s); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New(%+v) = %v, want an error naming %s", tc.s, err, tc.want)
			}
		})
	}
}

func TestNew_defaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, Settings{Name: "d"})
		if b.Name() != "d" || b.State() != Closed {
			t.Fatalf("name %q state %v", b.Name(), b.State())
		}
		for i := range DefaultFailures - 1 {
			if err := call(b, errDown, 0); err != nil {
				t.Fatalf("call %d refused: %v", i, err)
			}
		}
		if b.State() != Closed {
			t.Fatalf("open after %d failures, want %d", DefaultFailures-1, DefaultFailures)
		}
		_ = call(b, errDown, 0)
		if b.State() != Open {
			t.Fatalf("state after %d failures = %v, want open", DefaultFailures, b.State())
		}
		// The bubble's clock moves only by the sleeps: open until the
		// default open timeout has passed, then a probe is let through.
		time.Sleep(DefaultOpenTimeout - time.Millisecond)
		if err := call(b, nil, 0); !errors.Is(err, ErrOpen) {
			t.Fatalf("err = %v, want ErrOpen within the %v default open timeout", err, DefaultOpenTimeout)
		}
		time.Sleep(2 * time.Millisecond)
		if err := call(b, nil, 0); err != nil || b.State() != Closed {
			t.Fatalf("past the default open timeout: err = %v, state %v; want the probe run and closed", err, b.State())
		}
		// Slow calls do not count by default.
		b2 := mustNew(t, Settings{Failures: 1})
		_ = call(b2, nil, 20*time.Millisecond)
		if b2.State() != Closed {
			t.Fatal("a slow success opened a breaker without SlowCall")
		}
	})
}

func TestBreaker_transitionsAndCallbacksInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		const openTimeout = 30 * time.Millisecond
		b := mustNew(t, Settings{Name: "t", Failures: 2, OpenTimeout: openTimeout, OnStateChange: rec.on})
		_ = call(b, errDown, 0)
		_ = call(b, nil, 0) // a success resets the run
		_ = call(b, errDown, 0)
		if b.State() != Closed {
			t.Fatal("opened without 2 consecutive failures")
		}
		_ = call(b, errDown, 0)
		// The bubble's clock moves only by the sleeps: past the open timeout,
		// the next call is a probe.
		time.Sleep(openTimeout + 10*time.Millisecond)
		_ = call(b, errDown, 0) // failed probe: open again
		time.Sleep(openTimeout + 10*time.Millisecond)
		_ = call(b, nil, 0) // good probe: closed
		want := "closed>open,open>half-open,half-open>open,open>half-open,half-open>closed"
		if got := rec.String(); got != want {
			t.Fatalf("transitions %q, want %q", got, want)
		}
	})
}

func TestBreaker_openRefusesCalls(t *testing.T) {
	rec := &recorder{}
	b := mustNew(t, Settings{Name: "t", Failures: 1, OpenTimeout: time.Hour, OnStateChange: rec.on})
	_ = call(b, errDown, 0)
	for range 3 {
		if err := call(b, nil, 0); !errors.Is(err, ErrOpen) || !strings.Contains(err.Error(), "(t)") {
			t.Fatalf("open: err = %v, want ErrOpen naming the breaker", err)
		}
	}
	if got := rec.String(); got != "closed>open" || b.State() != Open {
		t.Fatalf("transitions %q, state %v; want closed>open, open", got, b.State())
	}
}

func TestBreaker_halfOpenProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const openTimeout = 20 * time.Millisecond
		b := mustNew(t, Settings{Failures: 1, OpenTimeout: openTimeout, HalfOpenProbes: 2})
		_ = call(b, errDown, 0)
		time.Sleep(openTimeout + 10*time.Millisecond) // half-open from then on, until the probes end
		d1, err1 := begin(t, b)
		d2, err2 := begin(t, b)
		_, err3 := begin(t, b)
		if err1 != nil || err2 != nil {
			t.Fatalf("probes refused: %v %v", err1, err2)
		}
		if !errors.Is(err3, ErrTooManyProbes) || errors.Is(err3, ErrOpen) {
			t.Fatalf("third call while half-open: %v, want ErrTooManyProbes", err3)
		}
		if b.State() != HalfOpen {
			t.Fatalf("state %v, want half-open", b.State())
		}
		d1(nil)
		if b.State() != HalfOpen {
			t.Fatal("closed after one of two probes")
		}
		d2(nil)
		if b.State() != Closed {
			t.Fatalf("state %v after two good probes, want closed", b.State())
		}
	})
}

func TestBreaker_outcomes(t *testing.T) {
	custom := errors.New("counts")
	harmless := errors.New("client error")
	cases := []struct {
		name      string
		s         Settings
		err       error
		took      time.Duration
		wantTrips bool
	}{
		{"error", Settings{}, errDown, 0, true},
		{"success", Settings{}, nil, 0, false},
		{"canceled", Settings{}, context.Canceled, 0, false},
		{"wrapped canceled", Settings{}, fmt.Errorf("get: %w", context.Canceled), 0, false},
		{"deadline exceeded counts", Settings{}, context.DeadlineExceeded, 0, true},
		{"ignore", Settings{}, Ignore, 0, false},
		// In the bubble a call lasts exactly its sleep; a call that does not
		// sleep stays under a minute however loaded the machine.
		{"slow success", Settings{SlowCall: 10 * time.Millisecond}, nil, 20 * time.Millisecond, true},
		{"fast success", Settings{SlowCall: time.Minute}, nil, 0, false},
		{"slow ignore", Settings{SlowCall: 10 * time.Millisecond}, Ignore, 20 * time.Millisecond, false},
		{"wrapped ignore", Settings{}, fmt.Errorf("gave up: %w", Ignore), 0, false},
		{"slow failure", Settings{SlowCall: 10 * time.Millisecond}, errDown, 20 * time.Millisecond, true},
		{"IsFailure yes", Settings{IsFailure: func(err error) bool { return errors.Is(err, custom) }}, custom, 0, true},
		{"IsFailure no", Settings{IsFailure: func(err error) bool { return errors.Is(err, custom) }}, harmless, 0, false},
		{"IsFailure true for canceled", Settings{IsFailure: func(error) bool { return true }}, context.Canceled, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := tc.s
				s.Failures = 2
				b := mustNew(t, s)
				_ = call(b, tc.err, tc.took)
				_ = call(b, tc.err, tc.took)
				if got := b.State() == Open; got != tc.wantTrips {
					t.Fatalf("two calls ending %v after %v: open = %v, want %v", tc.err, tc.took, got, tc.wantTrips)
				}
			})
		})
	}
}

func TestBreaker_ignoreDoesNotBreakARun(t *testing.T) {
	b := mustNew(t, Settings{Failures: 2})
	_ = call(b, errDown, 0)
	_ = call(b, Ignore, 0)           // neither success nor failure
	_ = call(b, context.Canceled, 0) // likewise by default
	_ = call(b, errDown, 0)
	if b.State() != Open {
		t.Fatalf("state %v, want open: ignored outcomes must not reset the run of failures", b.State())
	}
}

func TestBreaker_callbackReentersBreaker_noDeadlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b *Breaker
		var states []State
		var mu sync.Mutex
		b = mustNew(t, Settings{Failures: 1, OpenTimeout: 10 * time.Millisecond, OnStateChange: func(_ string, _, to State) {
			s := b.State() // would deadlock if called under a lock
			_ = b.Execute(func() error { return nil })
			mu.Lock()
			states = append(states, to, s)
			mu.Unlock()
		}})
		finished := make(chan struct{})
		go func() {
			defer close(finished)
			_ = call(b, errDown, 0)
			time.Sleep(20 * time.Millisecond)
			_ = call(b, nil, 0)
		}()
		select {
		case <-finished:
		case <-time.After(10 * time.Second):
			t.Fatal("deadlock: callback calling back into the breaker")
		}
		mu.Lock()
		defer mu.Unlock()
		if len(states) < 2 || states[0] != Open {
			t.Fatalf("callback saw %v, want it to run from the first transition (to open)", states)
		}
	})
}

func TestBreaker_concurrentCallbacksChainInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		b := mustNew(t, Settings{Failures: 3, OpenTimeout: time.Millisecond, OnStateChange: rec.on})
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 300 {
					// Three failures, then a success: each goroutine trips
					// the breaker on its own, however the scheduler
					// interleaves them, and the sleeps let it half-open.
					var err error
					if (g+i)%4 != 0 {
						err = errDown
					}
					_ = call(b, err, 0)
					if i%50 == 0 {
						time.Sleep(2 * time.Millisecond)
					}
				}
			}()
		}
		wg.Wait()
		_ = b.State() // deliver anything still queued
		got := strings.Split(rec.String(), ",")
		if len(got) < 2 {
			t.Fatalf("only %d transitions; the test needs several", len(got))
		}
		prev := "closed"
		for i, x := range got {
			from, to, _ := strings.Cut(x, ">")
			if from != prev {
				t.Fatalf("transition %d is %s, but the state was %s: out of order: %v", i, x, prev, got)
			}
			prev = to
		}
	})
}

func TestBreaker_Execute(t *testing.T) {
	rec := &recorder{}
	b := mustNew(t, Settings{Failures: 1, OpenTimeout: time.Hour, OnStateChange: rec.on})
	if err := b.Execute(func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	// fn's own error comes back as it is, whatever it counts as.
	for _, want := range []error{errDown, Ignore, context.Canceled} {
		b := mustNew(t, Settings{Failures: 3})
		if got := b.Execute(func() error { return want }); got != want {
			t.Fatalf("Execute returned %v, want fn's %v", got, want)
		}
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Execute swallowed the panic")
			}
		}()
		_ = b.Execute(func() error { panic("boom") })
	}()
	// The transition is delivered before the panic leaves Execute.
	if got := rec.String(); got != "closed>open" {
		t.Fatalf("transitions after a panic %q, want closed>open", got)
	}
	if b.State() != Open {
		t.Fatal("a panic did not count as a failure")
	}
	ran := false
	if err := b.Execute(func() error { ran = true; return nil }); !errors.Is(err, ErrOpen) || ran {
		t.Fatalf("open: err %v ran %v, want ErrOpen and fn not run", err, ran)
	}
}

func TestState_String(t *testing.T) {
	for s, want := range map[State]string{Closed: "closed", HalfOpen: "half-open", Open: "open", State(7): "State(7)"} {
		if s.String() != want {
			t.Errorf("%d: %q, want %q", int(s), s.String(), want)
		}
	}
}

func TestBreaker_FailureRatio_tripsOnRateNotRun(t *testing.T) {
	b, err := New(Settings{Name: "r", FailureRatio: 0.5, MinRequests: 10, Window: time.Minute, OpenTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	call := func(fail bool) {
		t.Helper()
		var err error
		if fail {
			err = errors.New("boom")
		}
		if err := call(b, err, 0); err != nil {
			t.Fatalf("Execute() = %v while %v", err, b.State())
		}
	}
	// Six failures in a row would open a breaker counting a run of five;
	// this one waits for MinRequests calls before it judges the rate.
	for range 6 {
		call(true)
	}
	if b.State() != Closed {
		t.Fatalf("state = %v after 6 of 6 failures, below MinRequests; want closed", b.State())
	}
	for range 3 {
		call(false)
	}
	if b.State() != Closed {
		t.Fatal("opened before MinRequests")
	}
	call(true) // 10 calls, 7 failed: 70% >= 50%
	if b.State() != Open {
		t.Fatalf("state = %v at 7 failures of 10, want open", b.State())
	}
}

func TestBreaker_FailureRatio_staysClosedBelowRate(t *testing.T) {
	b, err := New(Settings{Name: "r", FailureRatio: 0.5, MinRequests: 10, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		var err error
		if i%3 == 0 {
			err = errors.New("boom") // a third fail
		}
		if err := call(b, err, 0); err != nil {
			t.Fatalf("call %d: Execute() = %v", i, err)
		}
	}
	if b.State() != Closed {
		t.Fatalf("state = %v with a third of calls failing, want closed", b.State())
	}
}

func TestBreaker_Subscribe_everySubscriberHearsUntilItLeaves(t *testing.T) {
	b, err := New(Settings{Name: "shared", Failures: 1, OpenTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var a, c []State
	stopA := b.Subscribe(func(_ string, _, to State) { a = append(a, to) })
	stopC := b.Subscribe(func(_ string, _, to State) { c = append(c, to) })
	stopC()
	if err := call(b, errors.New("boom"), 0); err != nil {
		t.Fatal(err)
	}
	stopA()
	if len(a) != 1 || a[0] != Open || len(c) != 0 {
		t.Fatalf("subscriber a heard %v, c (unsubscribed) heard %v; want [open] and []", a, c)
	}
}

func TestBreaker_FailureRatio_windowRolls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = 100 * time.Millisecond
		b := mustNew(t, Settings{Name: "w", FailureRatio: 0.5, MinRequests: 4, Window: window, OpenTimeout: time.Minute})
		for range 3 {
			_ = call(b, errDown, 0)
		}
		// The bubble's clock moves only by the sleeps: the three failures are
		// out of the window now.
		time.Sleep(window + 2*window/windowBuckets)
		_ = call(b, errDown, 0)
		for range 3 {
			_ = call(b, nil, 0)
		}
		if b.State() != Closed {
			t.Fatalf("state = %v: 1 failure of 4 in the window, but failures from before it counted", b.State())
		}
		for range 4 {
			_ = call(b, errDown, 0)
		}
		if b.State() != Open {
			t.Fatalf("state = %v at 5 failures of 8 in the window, want open", b.State())
		}
	})
}

func TestBreaker_FailureRatio_ignoredCallsCountNeitherWay(t *testing.T) {
	b := mustNew(t, Settings{Name: "i", FailureRatio: 0.5, MinRequests: 4, Window: time.Minute})
	for range 2 {
		_ = call(b, errDown, 0)
		_ = call(b, Ignore, 0)
		_ = call(b, context.Canceled, 0)
	}
	if b.State() != Closed {
		t.Fatalf("state = %v after 2 failures: ignored calls counted toward MinRequests", b.State())
	}
	_ = call(b, nil, 0)
	_ = call(b, errDown, 0) // 3 failures of 4
	if b.State() != Open {
		t.Fatalf("state = %v at 3 failures of 4, want open: ignored calls diluted the rate", b.State())
	}
}

func TestBreaker_halfOpen_ignoredProbeFreesItsSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const openTimeout = 20 * time.Millisecond
		b := mustNew(t, Settings{Failures: 1, OpenTimeout: openTimeout})
		_ = call(b, errDown, 0)
		time.Sleep(openTimeout + 10*time.Millisecond)
		if err := call(b, Ignore, 0); err != nil {
			t.Fatalf("probe refused: %v", err)
		}
		if b.State() != HalfOpen {
			t.Fatalf("state %v after an ignored probe, want still half-open", b.State())
		}
		if err := call(b, nil, 0); err != nil {
			t.Fatalf("second probe refused after the first said nothing: %v", err)
		}
		if b.State() != Closed {
			t.Fatalf("state %v after a good probe, want closed", b.State())
		}
	})
}

func TestBreaker_lateOutcomeOfAnOlderStateIsDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const openTimeout = 20 * time.Millisecond
		b := mustNew(t, Settings{Failures: 1, OpenTimeout: openTimeout})
		late, err := begin(t, b) // admitted while closed
		if err != nil {
			t.Fatal(err)
		}
		_ = call(b, errDown, 0)
		time.Sleep(openTimeout + 10*time.Millisecond)
		probe, err := begin(t, b)
		if err != nil {
			t.Fatalf("probe refused: %v", err)
		}
		late(errDown) // from before the breaker opened: says nothing now
		if b.State() != HalfOpen {
			t.Fatalf("state %v: a failure from the closed state reopened a half-open breaker", b.State())
		}
		probe(nil)
		if b.State() != Closed {
			t.Fatalf("state %v after a good probe, want closed", b.State())
		}
	})
}

// The hot paths allocate nothing: a closed breaker's Execute, with a
// success, a failure or an ignored outcome, and an open breaker's refusal.
func TestBreaker_noAllocations(t *testing.T) {
	for _, s := range []Settings{{Name: "run"}, {Name: "ratio", FailureRatio: 0.5}, {Name: "slow", SlowCall: time.Hour}} {
		b := mustNew(t, s)
		fn := func() error { return nil }
		if n := testing.AllocsPerRun(100, func() { _ = b.Execute(fn) }); n != 0 {
			t.Errorf("%s: Execute allocates %v times per call, want 0", s.Name, n)
		}
		if n := testing.AllocsPerRun(100, func() { _ = call(b, nil, 0) }); n != 0 {
			t.Errorf("%s: a call whose fn captures its variables allocates %v times, want 0", s.Name, n)
		}
		if n := testing.AllocsPerRun(100, func() { _ = call(b, Ignore, 0) }); n != 0 {
			t.Errorf("%s: an ignored outcome allocates %v times per call, want 0", s.Name, n)
		}
		if n := testing.AllocsPerRun(100, func() { _ = call(b, errDown, 0); _ = call(b, nil, 0) }); n != 0 {
			t.Errorf("%s: a failure allocates %v times per call, want 0", s.Name, n)
		}
	}
	b := mustNew(t, Settings{Name: "open", Failures: 1, OpenTimeout: time.Hour})
	_ = call(b, errDown, 0)
	if n := testing.AllocsPerRun(100, func() { _ = b.Execute(func() error { return nil }) }); n != 0 {
		t.Errorf("refusing allocates %v times per call, want 0", n)
	}
}

// Many goroutines through one breaker: no outcome lost to a race between
// the lock-free counters and a transition.
func TestBreaker_concurrentRunOpensOnce(t *testing.T) {
	rec := &recorder{}
	b := mustNew(t, Settings{Name: "c", Failures: 50, OpenTimeout: time.Hour, OnStateChange: rec.on})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				_ = b.Execute(func() error { return errDown })
			}
		})
	}
	wg.Wait()
	if got := rec.String(); got != "closed>open" || b.State() != Open {
		t.Fatalf("transitions %q, state %v; want closed>open once, open", got, b.State())
	}
}

// IsFailure is the user's code: it runs outside gobreaker's mutex, so it
// may call back into the breaker.
func TestBreaker_IsFailureReentersBreaker_noDeadlock(t *testing.T) {
	var b *Breaker
	var seen []State
	b = mustNew(t, Settings{Failures: 1, OpenTimeout: time.Hour, IsFailure: func(err error) bool {
		seen = append(seen, b.State())
		return err != nil
	}})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		_ = call(b, errDown, 0)
	}()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("deadlock: IsFailure calling back into the breaker")
	}
	if len(seen) != 1 || seen[0] != Closed || b.State() != Open {
		t.Fatalf("IsFailure saw %v, state %v; want [closed], open", seen, b.State())
	}
}

// A call's outcome counts in the window bucket of when the call began:
// one that began before the window is dropped when it ends.
func TestBreaker_FailureRatio_outcomeOfACallFromBeforeTheWindowIsDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = 100 * time.Millisecond
		b := mustNew(t, Settings{Name: "late", FailureRatio: 0.5, MinRequests: 2, Window: window, OpenTimeout: time.Minute})
		late, err := begin(t, b)
		if err != nil {
			t.Fatal(err)
		}
		// The bubble's clock moves only by the sleeps: the late call began
		// before the window now.
		time.Sleep(window + 2*window/windowBuckets)
		_ = call(b, errDown, 0)
		late(errDown)
		if b.State() != Closed {
			t.Fatalf("state = %v: a call from before the window counted toward MinRequests", b.State())
		}
		_ = call(b, errDown, 0)
		if b.State() != Open {
			t.Fatalf("state = %v at 2 failures of 2 in the window, want open", b.State())
		}
	})
}
