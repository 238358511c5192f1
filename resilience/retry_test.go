package resilience

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/herdguard/herdguard/breaker"
)

// errBoom is a loader failure that retry treats as transient.
var errBoom = errors.New("boom")

// fastRetry is a retry policy whose waits are short enough for tests.
func fastRetry(attempts int) RetrySettings {
	return RetrySettings{MaxAttempts: attempts, Initial: time.Millisecond, Max: 2 * time.Millisecond}
}

// TestBuild_Retry_validate: Build refuses RetrySettings that make no
// sense with a ConfigError on Retry whose problem names the field at
// fault, and accepts the zero settings.
func TestBuild_Retry_validate(t *testing.T) {
	defer goleak.VerifyNone(t)
	tests := []struct {
		name  string
		s     RetrySettings
		field string // named by the problem; "" for none
	}{
		// Every rule is tested in internal/loadcall (TestRetry_Validate);
		// these show that Build applies them and names the field.
		{"zero", RetrySettings{}, ""},
		{"negative attempts", RetrySettings{MaxAttempts: -1}, "MaxAttempts"},
		{"randomization of one", RetrySettings{RandomizationFactor: 1}, "RandomizationFactor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New[string]("retry-validate").Keyless().Retry(tt.s).Build()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Build: %v, want the zero RetrySettings accepted", err)
				}
				_ = p.Close()
				return
			}
			if err == nil {
				_ = p.Close()
				t.Fatalf("Build accepted %+v", tt.s)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != "Retry" || !strings.HasPrefix(ce.Problem, tt.field+" ") {
				t.Errorf("err = %v, want a ConfigError on Retry whose problem names %q", err, tt.field)
			}
		})
	}
}

// TestPipeline_Retry_defaults: zero RetrySettings take their defaults:
// three attempts.
func TestPipeline_Retry_defaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := build(t, New[string]("retry-defaults").Keyless().Retry(RetrySettings{}))
		var calls atomic.Int32
		load := countingLoader(math.MaxInt32, "", &calls)
		if _, err := p.Do(context.Background(), func(ctx context.Context) (string, error) { return load(ctx, "") }); !errors.Is(err, errBoom) {
			t.Fatalf("err = %v, want errBoom", err)
		}
		if n := calls.Load(); n != 3 {
			t.Errorf("loader calls = %d, want the default 3 attempts", n)
		}
	})
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
