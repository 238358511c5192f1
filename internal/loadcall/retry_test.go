package loadcall

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/cache"
)

func TestCaller_Retryable(t *testing.T) {
	errSkip := errors.New("skip me")
	onlyNotSkip := func(err error) bool { return !errors.Is(err, errSkip) }
	attemptTimeout := timedOut(time.Second, context.DeadlineExceeded)
	tests := []struct {
		name      string
		retryable func(error) bool
		err       error
		want      bool
	}{
		{"nil", nil, nil, false},
		{"plain error", nil, errBoom, true},
		{"wrapped plain error", nil, fmt.Errorf("load: %w", errBoom), true},
		{"permanent", nil, backoff.Permanent(errBoom), false},
		{"wrapped permanent", nil, fmt.Errorf("load: %w", backoff.Permanent(errBoom)), false},
		{"canceled", nil, context.Canceled, false},
		{"wrapped canceled", nil, fmt.Errorf("load: %w", context.Canceled), false},
		{"flight deadline", nil, context.DeadlineExceeded, false},
		{"attempt timeout", nil, attemptTimeout, true},
		{"breaker open", nil, fmt.Errorf("%w (db)", breaker.ErrOpen), false},
		{"breaker probes in flight", nil, fmt.Errorf("%w (db)", breaker.ErrTooManyProbes), false},
		{"not found", nil, cache.ErrNotFound, false},
		{"wrapped not found", nil, fmt.Errorf("user 42: %w", cache.ErrNotFound), false},
		{"panic", nil, panicked("loader", "oops"), true},
		{"Retryable says no", onlyNotSkip, errSkip, false},
		{"Retryable says yes", onlyNotSkip, errBoom, true},
		{"Retryable cannot revive canceled", func(error) bool { return true }, context.Canceled, false},
		{"Retryable cannot revive permanent", func(error) bool { return true }, backoff.Permanent(errBoom), false},
		{"Retryable cannot revive not found", func(error) bool { return true }, cache.ErrNotFound, false},
		{"Retryable cannot revive breaker open", func(error) bool { return true }, breaker.ErrOpen, false},
		{"Retryable that panics ends the retries", func(error) bool { panic("hook boom") }, errBoom, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Retry{Retryable: tt.retryable}.WithDefaults()
			if got := newCaller(t, &r).Retryable(tt.err); got != tt.want {
				t.Errorf("Retryable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestRun_attemptsByError(t *testing.T) {
	tests := []struct {
		name  string
		err   error // what every attempt returns
		calls int   // attempts expected with MaxAttempts 4
	}{
		{"transient error is retried to the limit", errBoom, 4},
		{"permanent error stops at once", backoff.Permanent(errBoom), 1},
		{"canceled stops at once", context.Canceled, 1},
		{"deadline exceeded stops at once", context.DeadlineExceeded, 1},
		{"breaker open stops at once", fmt.Errorf("%w (db)", breaker.ErrOpen), 1},
		{"not found stops at once", cache.ErrNotFound, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				calls := 0
				_, err := Run(context.Background(), newCaller(t, fastRetry(4)), nil, func(n int) (int, error) {
					calls++
					if n != calls {
						t.Errorf("attempt number = %d, want %d", n, calls)
					}
					return 0, tt.err
				})
				if calls != tt.calls {
					t.Errorf("attempts = %d, want %d", calls, tt.calls)
				}
				if err == nil {
					t.Fatal("Run returned no error")
				}
				var perm *backoff.PermanentError
				if errors.As(err, &perm) {
					t.Errorf("Run returned %v still wrapped as permanent", err)
				}
			})
		})
	}
}

func TestRun_permanentUnwrapped(t *testing.T) {
	for _, r := range []*Retry{fastRetry(3), nil} {
		t.Run(fmt.Sprintf("with Retry %v", r != nil), func(t *testing.T) {
			_, err := Run(context.Background(), newCaller(t, r), nil, func(int) (int, error) { return 0, backoff.Permanent(errBoom) })
			if err != errBoom {
				t.Fatalf("err = %#v, want errBoom itself", err)
			}
		})
	}
}

func TestRun_succeedsAfterFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		v, err := Run(context.Background(), newCaller(t, fastRetry(3)), nil, func(n int) (string, error) {
			calls++
			if n < 3 {
				return "", errBoom
			}
			return "ok", nil
		})
		if err != nil || v != "ok" || calls != 3 {
			t.Fatalf("Run = (%q, %v) after %d calls, want (\"ok\", nil) after 3", v, err, calls)
		}
	})
}

func TestRun_withoutRetryRunsOnce(t *testing.T) {
	calls := 0
	_, err := Run(context.Background(), newCaller(t, nil), nil, func(int) (int, error) { calls++; return 0, errBoom })
	if calls != 1 || !errors.Is(err, errBoom) {
		t.Fatalf("calls = %d, err = %v; want 1 call and errBoom", calls, err)
	}
}

func TestRun_maxAttempts(t *testing.T) {
	for _, max := range []int{1, 2, 5} {
		t.Run(fmt.Sprint(max), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				calls := 0
				_, err := Run(context.Background(), newCaller(t, fastRetry(max)), nil, func(int) (int, error) { calls++; return 0, errBoom })
				if calls != max {
					t.Errorf("attempts = %d, want %d", calls, max)
				}
				if !errors.Is(err, errBoom) {
					t.Errorf("err = %v, want the last attempt's errBoom", err)
				}
			})
		})
	}
}

// TestRun_failureHook: an error that failure says is not a failure is an
// answer, and is not retried.
func TestRun_failureHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		notFailure := func(error) bool { return false }
		_, err := Run(context.Background(), newCaller(t, fastRetry(3)), notFailure, func(int) (int, error) { calls++; return 0, errBoom })
		if calls != 1 || err != errBoom {
			t.Fatalf("calls = %d, err = %v; want 1 call and errBoom", calls, err)
		}
	})
}

// TestRun_maxElapsed: the attempts stop once the next wait would end past
// MaxElapsed after the first attempt, though MaxAttempts allows more.
func TestRun_maxElapsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Every wait is in [5ms, 15ms] (Initial 10ms, factor 0.5, Max
		// 10ms), so a 50ms budget allows 4 to 11 attempts; MaxAttempts
		// would allow 1000.
		r := Retry{MaxAttempts: 1000, Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond,
			MaxElapsed: 50 * time.Millisecond}.WithDefaults()
		start := time.Now()
		calls := 0
		_, err := Run(context.Background(), newCaller(t, &r), nil, func(int) (int, error) { calls++; return 0, errBoom })
		if !errors.Is(err, errBoom) {
			t.Fatalf("err = %v, want errBoom", err)
		}
		if calls < 4 || calls > 11 {
			t.Errorf("attempts = %d, want between 4 and 11 under a 50ms MaxElapsed", calls)
		}
		if d := time.Since(start); d > r.MaxElapsed {
			t.Errorf("Run took %v, past its MaxElapsed of %v", d, r.MaxElapsed)
		}
	})
}

// TestRun_ctxCanceledDuringBackoff: a cancellation ends the wait between
// attempts at once, with the last attempt's error.
func TestRun_ctxCanceledDuringBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The backoff would wait an hour: only the cancellation can end it.
		r := Retry{MaxAttempts: 5, Initial: time.Hour, Max: time.Hour, MaxElapsed: 10 * time.Hour}.WithDefaults()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c := newCaller(t, &r)
		var calls atomic.Int32
		res := make(chan error, 1)
		go func() {
			_, err := Run(ctx, c, nil, func(int) (int, error) { calls.Add(1); return 0, errBoom })
			res <- err
		}()
		synctest.Wait() // Run waits in its backoff
		start := time.Now()
		cancel()
		if err := <-res; !errors.Is(err, errBoom) {
			t.Errorf("err = %v, want the attempt's errBoom", err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("Run returned %v after its context was canceled, want at once", d)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("attempts = %d, want 1", n)
		}
	})
}

// TestRun_stopsBeforeDeadline: a wait that would end after ctx's deadline
// is not started: the last error comes back at once.
func TestRun_stopsBeforeDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := Retry{MaxAttempts: 3, Initial: time.Hour, Max: time.Hour, MaxElapsed: 10 * time.Hour}.WithDefaults()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		calls := 0
		_, err := Run(ctx, newCaller(t, &r), nil, func(int) (int, error) { calls++; return 0, errBoom })
		if !errors.Is(err, errBoom) || calls != 1 {
			t.Fatalf("err = %v after %d calls, want errBoom after 1", err, calls)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("Run returned after %v, having waited towards the deadline", d)
		}
	})
}

func TestRetry_WithDefaults(t *testing.T) {
	got := Retry{}.WithDefaults()
	want := Retry{MaxAttempts: 3, Initial: 100 * time.Millisecond, Multiplier: 2,
		RandomizationFactor: 0.5, Max: 2 * time.Second, MaxElapsed: 10 * time.Second}
	if got.MaxAttempts != want.MaxAttempts || got.Initial != want.Initial || got.Multiplier != want.Multiplier ||
		got.RandomizationFactor != want.RandomizationFactor || got.Max != want.Max || got.MaxElapsed != want.MaxElapsed {
		t.Fatalf("defaults = %+v, want %+v", got, want)
	}
	set := Retry{MaxAttempts: 7, Initial: time.Second, Multiplier: 3, RandomizationFactor: 0.1, Max: time.Minute, MaxElapsed: time.Hour}
	if got := set.WithDefaults(); got.MaxAttempts != 7 || got.Initial != time.Second || got.Multiplier != 3 ||
		got.RandomizationFactor != 0.1 || got.Max != time.Minute || got.MaxElapsed != time.Hour {
		t.Fatalf("defaults of a Retry with every field set = %+v, want it unchanged", got)
	}
}

func TestRetry_Validate(t *testing.T) {
	tests := []struct {
		name  string
		s     Retry
		field string // named by the problem; "" for none
	}{
		{"zero", Retry{}, ""},
		{"defaults", Retry{}.WithDefaults(), ""},
		{"negative attempts", Retry{MaxAttempts: -1}, "MaxAttempts"},
		{"negative initial", Retry{Initial: -time.Second}, "Initial"},
		{"negative max", Retry{Max: -time.Second}, "Max"},
		{"negative max elapsed", Retry{MaxElapsed: -time.Second}, "MaxElapsed"},
		{"shrinking multiplier", Retry{Multiplier: 0.5}, "Multiplier"},
		{"negative randomization", Retry{RandomizationFactor: -0.1}, "RandomizationFactor"},
		{"randomization of one", Retry{RandomizationFactor: 1}, "RandomizationFactor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.s.Validate()
			if tt.field == "" && p != "" || tt.field != "" && !strings.HasPrefix(p, tt.field+" ") {
				t.Errorf("Validate() = %q, want a problem naming %q", p, tt.field)
			}
		})
	}
}

// TestRetry_Policy_jitterBounds checks that each interval lies within
// [i*(1-f), i*(1+f)] of its un-jittered value i, and that intervals are
// in fact spread.
func TestRetry_Policy_jitterBounds(t *testing.T) {
	tests := []struct {
		name string
		s    Retry
		f    float64 // the factor in force
	}{
		{"default factor", Retry{Initial: 10 * time.Millisecond, Max: 80 * time.Millisecond}, 0.5},
		{"small factor", Retry{Initial: 10 * time.Millisecond, Max: 80 * time.Millisecond, RandomizationFactor: 0.1}, 0.1},
		{"large factor", Retry{Initial: 10 * time.Millisecond, Max: 80 * time.Millisecond, RandomizationFactor: 0.9}, 0.9},
		{"slow growth", Retry{Initial: 10 * time.Millisecond, Max: time.Second, Multiplier: 1.5, RandomizationFactor: 0.3}, 0.3},
	}
	const samples = 200
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.s
			s.MaxAttempts = 8
			s.MaxElapsed = time.Hour // so that only MaxAttempts stops the backoff
			s = s.WithDefaults()
			firsts := map[time.Duration]bool{}
			for range samples {
				pol := s.Policy()
				bo := pol.NewBackOff()
				i := s.Initial
				for k := 1; k < s.MaxAttempts; k++ {
					got := bo.NextBackOff()
					lo := time.Duration(math.Floor(float64(i) * (1 - tt.f)))
					hi := time.Duration(math.Ceil(float64(i) * (1 + tt.f)))
					if got < lo || got > hi {
						t.Fatalf("interval %d = %v, want within [%v, %v] around %v", k, got, lo, hi, i)
					}
					if k == 1 {
						firsts[got] = true
					}
					i = min(time.Duration(float64(i)*s.Multiplier), s.Max)
				}
				if got := bo.NextBackOff(); got != backoff.Stop {
					t.Fatalf("interval after MaxAttempts-1 retries = %v, want Stop", got)
				}
			}
			if len(firsts) < 2 {
				t.Errorf("%d samples of the first interval were all %v: no jitter", samples, firsts)
			}
		})
	}
}

func TestRetry_Policy_freshPerCall(t *testing.T) {
	s := Retry{MaxAttempts: 2, Initial: time.Millisecond, MaxElapsed: time.Hour}.WithDefaults()
	pol := s.Policy()
	a := pol.NewBackOff()
	if a.NextBackOff() == backoff.Stop || a.NextBackOff() != backoff.Stop {
		t.Fatal("first backoff should allow exactly one retry")
	}
	if b := pol.NewBackOff(); b.NextBackOff() == backoff.Stop {
		t.Fatal("a second call's backoff shares the first call's retry count")
	}
}

// TestRetry_Policy_fields: the policy carries each field of the Retry as
// it is.
func TestRetry_Policy_fields(t *testing.T) {
	s := Retry{MaxAttempts: 4, Initial: time.Second, Multiplier: 3, RandomizationFactor: 0.2, Max: time.Minute, MaxElapsed: time.Hour}
	p := s.Policy()
	if p.MaxAttempts != 4 || p.Initial != time.Second || p.Multiplier != 3 || p.RandomizationFactor != 0.2 ||
		p.Max != time.Minute || p.MaxElapsed != time.Hour || p.MaxHint != 0 || p.Now != nil || p.Sleep != nil {
		t.Fatalf("Policy() = %+v, want the Retry's fields, and no hint limit or clock of its own", p)
	}
}
