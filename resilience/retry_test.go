package resilience

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/goleak"

	"github.com/herdguard/herdguard/breaker"
)

// errBoom is a loader failure that retry treats as transient.
var errBoom = errors.New("boom")

// fastRetry is a retry policy whose waits are short enough for tests.
func fastRetry(attempts int) RetrySettings {
	return RetrySettings{MaxAttempts: attempts, Initial: time.Millisecond, Max: 2 * time.Millisecond}
}

func TestRetrySettings_retryable(t *testing.T) {
	defer goleak.VerifyNone(t)
	errSkip := errors.New("skip me")
	onlyNotSkip := func(err error) bool { return !errors.Is(err, errSkip) }
	attemptTimeout := timedOut("loader attempt", time.Second, context.DeadlineExceeded)
	tests := []struct {
		name      string
		retryable func(error) bool
		err       error
		want      bool
	}{
		{"nil", nil, nil, false},
		{"plain error", nil, errBoom, true},
		{"wrapped plain error", nil, fmt.Errorf("load: %w", errBoom), true},
		{"permanent", nil, Permanent(errBoom), false},
		{"wrapped permanent", nil, fmt.Errorf("load: %w", Permanent(errBoom)), false},
		{"canceled", nil, context.Canceled, false},
		{"wrapped canceled", nil, fmt.Errorf("load: %w", context.Canceled), false},
		{"flight deadline", nil, context.DeadlineExceeded, false},
		{"attempt timeout", nil, attemptTimeout, true},
		{"breaker open", nil, fmt.Errorf("%w (db)", breaker.ErrOpen), false},
		{"breaker probes in flight", nil, fmt.Errorf("%w (db)", breaker.ErrTooManyProbes), false},
		{"not found", nil, ErrNotFound, false},
		{"wrapped not found", nil, fmt.Errorf("user 42: %w", ErrNotFound), false},
		{"Retryable says no", onlyNotSkip, errSkip, false},
		{"Retryable says yes", onlyNotSkip, errBoom, true},
		{"Retryable cannot revive canceled", func(error) bool { return true }, context.Canceled, false},
		{"Retryable cannot revive permanent", func(error) bool { return true }, Permanent(errBoom), false},
		{"Retryable cannot revive not found", func(error) bool { return true }, ErrNotFound, false},
		{"Retryable cannot revive breaker open", func(error) bool { return true }, breaker.ErrOpen, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := RetrySettings{Retryable: tt.retryable}.withDefaults()
			if got := s.retryable(tt.err); got != tt.want {
				t.Errorf("retryable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestRetry_attemptsByError(t *testing.T) {
	defer goleak.VerifyNone(t)
	tests := []struct {
		name  string
		err   error // what every attempt returns
		calls int   // attempts expected with MaxAttempts 4
	}{
		{"transient error is retried to the limit", errBoom, 4},
		{"permanent error stops at once", Permanent(errBoom), 1},
		{"canceled stops at once", context.Canceled, 1},
		{"deadline exceeded stops at once", context.DeadlineExceeded, 1},
		{"breaker open stops at once", fmt.Errorf("%w (db)", breaker.ErrOpen), 1},
		{"not found stops at once", ErrNotFound, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fastRetry(4).withDefaults()
			calls := 0
			_, err := retry(context.Background(), &s, nil, func(n int) (int, error) {
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
				t.Fatal("retry returned no error")
			}
			var perm *backoff.PermanentError
			if errors.As(err, &perm) {
				t.Errorf("retry returned %v still wrapped as permanent", err)
			}
		})
	}
}

func TestRetry_permanentUnwrapped(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := fastRetry(3).withDefaults()
	_, err := retry(context.Background(), &s, nil, func(int) (int, error) { return 0, Permanent(errBoom) })
	if err != errBoom {
		t.Fatalf("err = %#v, want errBoom itself", err)
	}
}

func TestRetry_succeedsAfterFailures(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := fastRetry(3).withDefaults()
	calls := 0
	v, err := retry(context.Background(), &s, nil, func(n int) (string, error) {
		calls++
		if n < 3 {
			return "", errBoom
		}
		return "ok", nil
	})
	if err != nil || v != "ok" || calls != 3 {
		t.Fatalf("retry = (%q, %v) after %d calls, want (\"ok\", nil) after 3", v, err, calls)
	}
}

func TestRetry_nilSettingsRunsOnce(t *testing.T) {
	defer goleak.VerifyNone(t)
	calls := 0
	_, err := retry(context.Background(), nil, nil, func(int) (int, error) { calls++; return 0, errBoom })
	if calls != 1 || !errors.Is(err, errBoom) {
		t.Fatalf("calls = %d, err = %v; want 1 call and errBoom", calls, err)
	}
}

func TestRetry_maxAttempts(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, max := range []int{1, 2, 5} {
		t.Run(fmt.Sprint(max), func(t *testing.T) {
			s := fastRetry(max).withDefaults()
			calls := 0
			_, err := retry(context.Background(), &s, nil, func(int) (int, error) { calls++; return 0, errBoom })
			if calls != max {
				t.Errorf("attempts = %d, want %d", calls, max)
			}
			if !errors.Is(err, errBoom) {
				t.Errorf("err = %v, want the last attempt's errBoom", err)
			}
		})
	}
}

func TestRetrySettings_withDefaults(t *testing.T) {
	defer goleak.VerifyNone(t)
	got := RetrySettings{}.withDefaults()
	want := RetrySettings{MaxAttempts: 3, Initial: 100 * time.Millisecond, Multiplier: 2,
		RandomizationFactor: 0.5, Max: 2 * time.Second, MaxElapsed: 10 * time.Second}
	if got.MaxAttempts != want.MaxAttempts || got.Initial != want.Initial || got.Multiplier != want.Multiplier ||
		got.RandomizationFactor != want.RandomizationFactor || got.Max != want.Max || got.MaxElapsed != want.MaxElapsed {
		t.Fatalf("defaults = %+v, want %+v", got, want)
	}
}

func TestRetrySettings_validate(t *testing.T) {
	defer goleak.VerifyNone(t)
	tests := []struct {
		name  string
		s     RetrySettings
		field string // named by the problem; "" for none
	}{
		{"zero", RetrySettings{}, ""},
		{"negative attempts", RetrySettings{MaxAttempts: -1}, "MaxAttempts"},
		{"negative initial", RetrySettings{Initial: -time.Second}, "Initial"},
		{"negative max", RetrySettings{Max: -time.Second}, "Max"},
		{"negative max elapsed", RetrySettings{MaxElapsed: -time.Second}, "MaxElapsed"},
		{"shrinking multiplier", RetrySettings{Multiplier: 0.5}, "Multiplier"},
		{"negative randomization", RetrySettings{RandomizationFactor: -0.1}, "RandomizationFactor"},
		{"randomization of one", RetrySettings{RandomizationFactor: 1}, "RandomizationFactor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.s.validate()
			if tt.field == "" && p != "" || tt.field != "" && !strings.HasPrefix(p, tt.field+" ") {
				t.Errorf("validate() = %q, want a problem naming %q", p, tt.field)
			}
		})
	}
}

// TestRetrySettings_policy_jitterBounds checks that each interval lies
// within [i*(1-f), i*(1+f)] of its un-jittered value i, and that intervals
// are in fact spread.
func TestRetrySettings_policy_jitterBounds(t *testing.T) {
	defer goleak.VerifyNone(t)
	tests := []struct {
		name string
		s    RetrySettings
		f    float64 // the factor in force
	}{
		{"default factor", RetrySettings{Initial: 10 * time.Millisecond, Max: 80 * time.Millisecond}, 0.5},
		{"small factor", RetrySettings{Initial: 10 * time.Millisecond, Max: 80 * time.Millisecond, RandomizationFactor: 0.1}, 0.1},
		{"large factor", RetrySettings{Initial: 10 * time.Millisecond, Max: 80 * time.Millisecond, RandomizationFactor: 0.9}, 0.9},
		{"slow growth", RetrySettings{Initial: 10 * time.Millisecond, Max: time.Second, Multiplier: 1.5, RandomizationFactor: 0.3}, 0.3},
	}
	const samples = 200
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.s
			s.MaxAttempts = 8
			s.MaxElapsed = time.Hour // so that only MaxAttempts stops the backoff
			s = s.withDefaults()
			firsts := map[time.Duration]bool{}
			for range samples {
				pol := s.policy()
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

func TestRetrySettings_policy_freshPerCall(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := RetrySettings{MaxAttempts: 2, Initial: time.Millisecond, MaxElapsed: time.Hour}.withDefaults()
	pol := s.policy()
	a := pol.NewBackOff()
	if a.NextBackOff() == backoff.Stop || a.NextBackOff() != backoff.Stop {
		t.Fatal("first backoff should allow exactly one retry")
	}
	if b := pol.NewBackOff(); b.NextBackOff() == backoff.Stop {
		t.Fatal("a second call's backoff shares the first call's retry count")
	}
}

func TestRetry_maxElapsed(t *testing.T) {
	defer goleak.VerifyNone(t)
	// Every wait is at least Initial*(1-0.5) = 5ms, so a 50ms budget allows
	// at most about 11 attempts; MaxAttempts would allow 1000.
	s := RetrySettings{MaxAttempts: 1000, Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond,
		MaxElapsed: 50 * time.Millisecond}.withDefaults()
	calls := 0
	_, err := retry(context.Background(), &s, nil, func(int) (int, error) { calls++; return 0, errBoom })
	if !errors.Is(err, errBoom) {
		t.Fatalf("err = %v, want errBoom", err)
	}
	if calls < 2 || calls > 13 {
		t.Fatalf("attempts = %d, want between 2 and 13 under a 50ms MaxElapsed", calls)
	}
}

func TestRetry_ctxCanceledDuringBackoff(t *testing.T) {
	defer goleak.VerifyNone(t)
	// The backoff would sleep an hour: only the cancellation can end it.
	s := RetrySettings{MaxAttempts: 5, Initial: time.Hour, Max: time.Hour, MaxElapsed: 10 * time.Hour}.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	attempted := make(chan struct{})
	var calls atomic.Int32
	type out struct{ err error }
	res := make(chan out, 1)
	go func() {
		_, err := retry(ctx, &s, nil, func(int) (int, error) {
			if calls.Add(1) == 1 {
				close(attempted)
			}
			return 0, errBoom
		})
		res <- out{err}
	}()
	<-attempted
	cancel()
	select {
	case r := <-res:
		if !errors.Is(r.err, errBoom) {
			t.Errorf("err = %v, want the attempt's errBoom", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("retry still sleeping 10s after its context was canceled")
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("attempts = %d, want 1", n)
	}
}

// countingLoader fails its first fails calls with errBoom, then returns v.
func countingLoader(fails int32, v string, calls *atomic.Int32) LoadFunc[string] {
	return func(context.Context, string) (string, error) {
		if calls.Add(1) <= fails {
			return "", errBoom
		}
		return v, nil
	}
}

func TestPipeline_Retry_failsTwiceThenSucceeds(t *testing.T) {
	defer goleak.VerifyNone(t)
	p, err := New[string]("retry-twice").Cache(time.Minute).SingleFlight().Retry(fastRetry(3)).Build()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var calls atomic.Int32
	r, err := p.GetResult(context.Background(), "k", countingLoader(2, "v", &calls))
	if err != nil {
		t.Fatal(err)
	}
	if r.Value != "v" || r.Source != SourceLoader || r.FellBack() {
		t.Errorf("result = %+v, want v from the loader", r)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("loader calls = %d, want 3", n)
	}
	// The value is cached: the loader is not called again.
	if v, err := p.Get(context.Background(), "k", countingLoader(0, "other", &calls)); err != nil || v != "v" {
		t.Errorf("second Get = (%q, %v), want the cached v", v, err)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("loader calls after a cached Get = %d, want 3", n)
	}
}

func TestPipeline_Retry_breakerSeesEveryAttempt(t *testing.T) {
	defer goleak.VerifyNone(t)
	var opened atomic.Int32
	p, err := New[string]("retry-breaker").Cache(time.Minute).
		Breaker(breaker.Settings{Failures: 2, OpenTimeout: time.Hour,
			OnStateChange: func(_ string, _, to breaker.State) {
				if to == breaker.Open {
					opened.Add(1)
				}
			}}).
		Retry(fastRetry(2)).
		Build()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var calls atomic.Int32
	load := countingLoader(math.MaxInt32, "", &calls)
	if _, err := p.Get(context.Background(), "k", load); !errors.Is(err, errBoom) {
		t.Fatalf("first Get err = %v, want errBoom", err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("loader calls = %d, want 2 (one Get, two attempts)", n)
	}
	if s := p.br.State(); s != breaker.Open {
		t.Fatalf("breaker = %v after one Get with 2 failed attempts, want open", s)
	}
	if n := opened.Load(); n != 1 {
		t.Errorf("breaker opened %d times, want 1", n)
	}
	// The open breaker refuses the next call before the loader runs, and
	// the refusal is not retried.
	if _, err := p.Get(context.Background(), "k", load); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("second Get err = %v, want breaker.ErrOpen", err)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("loader calls after the breaker opened = %d, want still 2", n)
	}
}

func TestPipeline_Retry_breakerOpenStopsRetries(t *testing.T) {
	defer goleak.VerifyNone(t)
	p, err := New[string]("retry-stop").Cache(time.Minute).
		Breaker(breaker.Settings{Failures: 1, OpenTimeout: time.Hour}).
		Retry(fastRetry(5)).
		Build()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var calls atomic.Int32
	_, err = p.Get(context.Background(), "k", countingLoader(math.MaxInt32, "", &calls))
	// Attempt 1 fails and opens the breaker; attempt 2 is refused and ends
	// the retries, though three attempts remain.
	if !errors.Is(err, breaker.ErrOpen) {
		t.Errorf("err = %v, want breaker.ErrOpen", err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("loader calls = %d, want 1", n)
	}
}

func TestPipeline_Retry_byLoaderError(t *testing.T) {
	defer goleak.VerifyNone(t)
	tests := []struct {
		name    string
		err     error
		calls   int32
		wantErr error
	}{
		{"transient", errBoom, 3, errBoom},
		{"not found", ErrNotFound, 1, ErrNotFound},
		{"permanent", Permanent(errBoom), 1, errBoom},
		{"loader's own canceled", context.Canceled, 1, context.Canceled},
		{"loader's own deadline", context.DeadlineExceeded, 1, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New[string]("retry-by-error").Cache(time.Minute).Retry(fastRetry(3)).Build()
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			var calls atomic.Int32
			_, err = p.Get(context.Background(), "k", func(context.Context, string) (string, error) {
				calls.Add(1)
				return "", tt.err
			})
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
			if n := calls.Load(); n != tt.calls {
				t.Errorf("loader calls = %d, want %d", n, tt.calls)
			}
		})
	}
}

func TestPipeline_Retry_attemptTimeoutIsRetried(t *testing.T) {
	defer goleak.VerifyNone(t)
	p, err := New[string]("retry-timeout").Cache(time.Minute).
		Timeout(20 * time.Millisecond).Retry(fastRetry(3)).Build()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var calls atomic.Int32
	_, err = p.Get(context.Background(), "k", func(ctx context.Context, _ string) (string, error) {
		calls.Add(1)
		<-ctx.Done() // the attempt's own timeout ends it
		return "", ctx.Err()
	})
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("err = %v, want ErrTimeout", err)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("loader calls = %d, want 3: an attempt's timeout is retried", n)
	}
}

func TestPipeline_Retry_Do(t *testing.T) {
	defer goleak.VerifyNone(t)
	p, err := New[string]("retry-do").Keyless().Retry(fastRetry(3)).Build()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var calls atomic.Int32
	load := countingLoader(2, "done", &calls)
	r, err := p.DoResult(context.Background(), func(ctx context.Context) (string, error) { return load(ctx, "") })
	if err != nil || r.Value != "done" || r.Source != SourceLoader {
		t.Fatalf("DoResult = (%+v, %v), want done from the loader", r, err)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("calls = %d, want 3", n)
	}
}

// TestRetry_isFailure_answersAreNotRetried: an error that IsFailure says
// is not a failure is an answer: not retried, not counted, not covered by
// the fallback chain.
func TestRetry_isFailure_answersAreNotRetried(t *testing.T) {
	errAnswer := errors.New("no such user")
	p := build(t, New[string]("answers").Cache(time.Minute).DefaultValue("default").
		Retry(RetrySettings{MaxAttempts: 3, Initial: time.Millisecond}).
		IsFailure(func(err error) bool { return !errors.Is(err, errAnswer) }))
	c := &counter{fn: func(int64) (string, error) { return "", errAnswer }}
	r, err := p.GetResult(context.Background(), "k", c.load)
	if !errors.Is(err, errAnswer) || r.Source == SourceDefault {
		t.Fatalf("GetResult() = %+v, %v; want the answer itself, not the default", r, err)
	}
	if n := c.calls.Load(); n != 1 {
		t.Fatalf("loader calls = %d, want 1: an answer is not retried", n)
	}
	c.fn = func(n int64) (string, error) { return "", errors.New("timeout talking to the DB") }
	if r, err := p.GetResult(context.Background(), "k2", c.load); err != nil || r.Source != SourceDefault {
		t.Fatalf("a failure: %+v, %v; want the default", r, err)
	}
	if n := c.calls.Load(); n != 4 {
		t.Fatalf("loader calls = %d, want 1 + 3 attempts for the failure", n)
	}
}

// TestPipeline_Retry_stopsBeforeDeadline: a backoff that would end after
// the caller's deadline is not slept: the last error comes back at once.
func TestPipeline_Retry_stopsBeforeDeadline(t *testing.T) {
	defer goleak.VerifyNone(t)
	p, err := New[string]("retry-deadline").Keyless().
		Retry(RetrySettings{MaxAttempts: 3, Initial: time.Hour, Max: time.Hour, MaxElapsed: 10 * time.Hour}).Build()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var calls atomic.Int32
	load := countingLoader(math.MaxInt32, "", &calls)
	_, err = p.Do(ctx, func(ctx context.Context) (string, error) { return load(ctx, "") })
	if !errors.Is(err, errBoom) || calls.Load() != 1 {
		t.Fatalf("err = %v after %d calls, want errBoom after 1", err, calls.Load())
	}
	if ctx.Err() != nil {
		t.Error("Do returned at the deadline, after sleeping towards it")
	}
}
