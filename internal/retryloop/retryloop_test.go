package retryloop

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/herdguard/herdguard/internal/retryloop/retrytest"
)

var errBusy = errors.New("busy")

// policy is a policy on a fake clock that starts now (so that real
// context deadlines mean something to it), with millisecond backoffs.
func policy(attempts int) (*Policy, *retrytest.Clock) {
	c := retrytest.New(time.Now())
	return &Policy{MaxAttempts: attempts, Initial: time.Millisecond, Multiplier: 2,
		RandomizationFactor: 0.5, Max: 2 * time.Millisecond, Now: c.Now, Sleep: c.Sleep}, c
}

// script returns an attempt that answers with outs in turn (the last one
// for ever), and the times, on c, at which it was called.
func script(c *retrytest.Clock, outs ...Next) (func(int) (int, Next, error), *[]time.Time) {
	var at []time.Time
	return func(n int) (int, Next, error) {
		at = append(at, c.Now())
		o := outs[min(n, len(outs))-1]
		if !o.Retry && o.Wait == 0 && n == len(outs) {
			return n, o, nil
		}
		return n, o, errBusy
	}, &at
}

func TestRun_hintHonoured(t *testing.T) {
	defer goleak.VerifyNone(t)
	p, c := policy(3)
	p.MaxHint = 10 * time.Second
	attempt, at := script(c, Next{Retry: true, Wait: time.Second}, Next{})
	v, err := Run(context.Background(), p, attempt, nil)
	if v != 2 || err != nil {
		t.Fatalf("Run = (%d, %v), want the second attempt's (2, nil)", v, err)
	}
	if want := []time.Duration{time.Second}; !slices.Equal(c.Waits(), want) {
		t.Errorf("waits = %v, want %v: the hint, longer than the backoff", c.Waits(), want)
	}
	if gap := (*at)[1].Sub((*at)[0]); gap < time.Second {
		t.Errorf("second attempt came %v after the first, want at least 1s", gap)
	}
}

func TestRun_hintShorterThanBackoff(t *testing.T) {
	defer goleak.VerifyNone(t)
	p, c := policy(2)
	p.Initial, p.Max, p.RandomizationFactor = time.Second, time.Second, 0
	attempt, _ := script(c, Next{Retry: true, Wait: time.Millisecond}, Next{})
	if _, err := Run(context.Background(), p, attempt, nil); err != nil {
		t.Fatal(err)
	}
	if want := []time.Duration{time.Second}; !slices.Equal(c.Waits(), want) {
		t.Errorf("waits = %v, want %v: the backoff, longer than the hint", c.Waits(), want)
	}
}

func TestRun_hintPastMaxHintStops(t *testing.T) {
	defer goleak.VerifyNone(t)
	p, c := policy(3)
	p.MaxHint = time.Second
	attempt, at := script(c, Next{Retry: true, Wait: 2 * time.Second}, Next{})
	v, err := Run(context.Background(), p, attempt, nil)
	if v != 1 || !errors.Is(err, errBusy) || len(*at) != 1 || len(c.Waits()) != 0 {
		t.Fatalf("Run = (%d, %v) after %d attempts and waits %v; want the first attempt's outcome, at once", v, err, len(*at), c.Waits())
	}
}

func TestRun_hintPastDeadlineStops(t *testing.T) {
	defer goleak.VerifyNone(t)
	p, c := policy(3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	attempt, at := script(c, Next{Retry: true, Wait: 2 * time.Minute}, Next{})
	v, err := Run(ctx, p, attempt, nil)
	if v != 1 || !errors.Is(err, errBusy) || len(*at) != 1 || len(c.Waits()) != 0 {
		t.Fatalf("Run = (%d, %v) after %d attempts and waits %v; want the first attempt's outcome, without waiting", v, err, len(*at), c.Waits())
	}
	if ctx.Err() != nil {
		t.Fatal("Run returned after the deadline")
	}
}

func TestRun_backoffPastDeadlineStops(t *testing.T) {
	defer goleak.VerifyNone(t)
	p, c := policy(3)
	p.Initial, p.Max = time.Hour, time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	attempt, at := script(c, Next{Retry: true}, Next{})
	if _, err := Run(ctx, p, attempt, nil); !errors.Is(err, errBusy) || len(*at) != 1 || len(c.Waits()) != 0 {
		t.Fatalf("err = %v after %d attempts and waits %v; want errBusy, at once", err, len(*at), c.Waits())
	}
}

func TestRun_noRetryStops(t *testing.T) {
	defer goleak.VerifyNone(t)
	p, c := policy(5)
	attempt, at := script(c, Next{Retry: false, Wait: time.Second}, Next{})
	calls := 0
	_, err := Run(context.Background(), p, func(n int) (int, Next, error) {
		calls++
		v, _, _ := attempt(n)
		return v, Next{}, errBusy // a permanent error: not worth another attempt
	}, nil)
	if !errors.Is(err, errBusy) || calls != 1 || len(*at) != 1 || len(c.Waits()) != 0 {
		t.Fatalf("err = %v after %d attempts; want errBusy after 1", err, calls)
	}
}

func TestRun_maxAttempts(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, n := range []int{1, 2, 5} {
		p, c := policy(n)
		attempt, at := script(c, Next{Retry: true})
		v, err := Run(context.Background(), p, attempt, nil)
		if v != n || !errors.Is(err, errBusy) || len(*at) != n || len(c.Waits()) != n-1 {
			t.Errorf("MaxAttempts %d: Run = (%d, %v) after %d attempts, %d waits", n, v, err, len(*at), len(c.Waits()))
		}
	}
}

func TestRun_maxElapsedCountsHints(t *testing.T) {
	defer goleak.VerifyNone(t)
	// Each attempt asks for 2s: attempts at 0s, 2s and 4s; a fourth at 6s
	// would pass MaxElapsed.
	p, c := policy(10)
	p.MaxElapsed = 5 * time.Second
	attempt, at := script(c, Next{Retry: true, Wait: 2 * time.Second})
	if _, err := Run(context.Background(), p, attempt, nil); !errors.Is(err, errBusy) || len(*at) != 3 {
		t.Fatalf("err = %v after %d attempts, want errBusy after 3", err, len(*at))
	}
}

func TestRun_dropAndCancel(t *testing.T) {
	defer goleak.VerifyNone(t)
	p, c := policy(3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var dropped []int
	attempt, _ := script(c, Next{Retry: true})
	// Canceled while waiting after the first attempt: its outcome was
	// dropped, so Run returns ctx's error.
	p.Sleep = func(context.Context, time.Duration) error { cancel(); return ctx.Err() }
	v, err := Run(ctx, p, attempt, func(v int) { dropped = append(dropped, v) })
	if v != 0 || !errors.Is(err, context.Canceled) || !slices.Equal(dropped, []int{1}) {
		t.Fatalf("Run = (%d, %v), dropped %v; want (0, context.Canceled), dropped [1]", v, err, dropped)
	}
	// Without drop, the last outcome comes back.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	v, err = Run(ctx, p, attempt, nil)
	if v != 1 || !errors.Is(err, errBusy) {
		t.Fatalf("Run = (%d, %v), want the first attempt's (1, errBusy)", v, err)
	}
}

func TestSleep(t *testing.T) {
	defer goleak.VerifyNone(t)
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on a canceled context = %v, want context.Canceled", err)
	}
}
