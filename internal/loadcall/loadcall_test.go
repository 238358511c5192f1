package loadcall

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/obs"
	"github.com/herdguard/herdguard/telemetry"
)

// The errors and hooks a Caller gets from its pipeline are doubled here,
// as package resilience gives them: a recovered panic is a *panicError,
// and a batch's per-key errors are a keyErrs.

// panicError is the test's error for a panic of stage with v.
type panicError struct {
	stage string
	v     any
}

func (e *panicError) Error() string {
	return fmt.Sprintf("loadcall test: %s panicked: %v", e.stage, e.v)
}

func panicked(stage string, v any) error { return &panicError{stage: stage, v: v} }

func isPanic(err error) bool {
	var pe *panicError
	return errors.As(err, &pe)
}

// keyErrs is the error of a batch's loader that failed some keys only.
type keyErrs map[string]error

func (k keyErrs) Error() string { return fmt.Sprintf("loadcall test: %d keys failed", len(k)) }

func keyErrors(err error) (map[string]error, bool) {
	var ke keyErrs
	ok := errors.As(err, &ke)
	return ke, ok
}

// errBoom is a loader failure that the retry treats as transient.
var errBoom = errors.New("boom")

// newCaller is a Caller with the doubles above and telemetry that records
// nothing, under r (nil: no Retry), with no breaker and no timeout.
func newCaller(t *testing.T, r *Retry) *Caller {
	t.Helper()
	return newCallerWith(t, r, telemetry.Config{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: metricnoop.NewMeterProvider()})
}

func newCallerWith(t *testing.T, r *Retry, tc telemetry.Config) *Caller {
	t.Helper()
	tel, err := obs.New("loadcall-test", "v0", "test", tc)
	if err != nil {
		t.Fatal(err)
	}
	return &Caller{Tel: tel, Retry: r, Loads: new(atomic.Uint64),
		Panicked: panicked, IsPanic: isPanic, KeyErrors: keyErrors}
}

// fastRetry is a Retry of attempts attempts with millisecond waits, with
// its defaults.
func fastRetry(attempts int) *Retry {
	r := Retry{MaxAttempts: attempts, Initial: time.Millisecond, Max: 2 * time.Millisecond}.WithDefaults()
	return &r
}

// withBreaker gives c a breaker that opens after failures failures, for
// an hour, and counts what c calls a load failure.
func withBreaker(t *testing.T, c *Caller, failures uint32) *Caller {
	t.Helper()
	b, err := breaker.New(breaker.Settings{Name: "loader", Failures: failures, OpenTimeout: time.Hour, IsFailure: c.IsLoadFailure})
	if err != nil {
		t.Fatal(err)
	}
	c.Breaker = b
	return c
}

// counting is a loader that returns outs in turn (the last for ever), and
// counts its calls.
func counting(calls *atomic.Int32, outs ...error) Func[string] {
	return Func[string]{Load: func(_ context.Context, key string) (string, error) {
		n := int(calls.Add(1))
		if err := outs[min(n, len(outs))-1]; err != nil {
			return "", err
		}
		return "v:" + key, nil
	}}
}

func TestCall_withoutRetry(t *testing.T) {
	tests := []struct {
		name    string
		err     error // the loader's
		wantErr error // Call's, matched with ==
	}{
		{"value", nil, nil},
		{"error", errBoom, errBoom},
		{"permanent is unwrapped", backoff.Permanent(errBoom), errBoom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCaller(t, nil)
			var calls atomic.Int32
			v, _, err := Call(context.Background(), c, "k", counting(&calls, tt.err))
			if err != tt.wantErr {
				t.Fatalf("err = %#v, want %#v", err, tt.wantErr)
			}
			if tt.err == nil && v != "v:k" {
				t.Errorf("value = %q, want the loader's v:k", v)
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("loader calls = %d, want 1", n)
			}
			if n := c.Loads.Load(); n != 1 {
				t.Errorf("Loads = %d, want 1", n)
			}
		})
	}
}

func TestCall_keylessFunc(t *testing.T) {
	c := newCaller(t, nil)
	v, _, err := Call(context.Background(), c, "", Func[int]{Do: func(context.Context) (int, error) { return 7, nil }})
	if v != 7 || err != nil {
		t.Fatalf("Call = (%d, %v), want (7, nil)", v, err)
	}
}

// TestCall_tookIsTheAttempts: Call returns how long the attempt that
// answered took, not the whole call with its backoff.
func TestCall_tookIsTheAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCaller(t, &Retry{MaxAttempts: 2, Initial: time.Minute, Max: time.Minute, MaxElapsed: time.Hour, Multiplier: 2, RandomizationFactor: 0.5})
		n := 0
		_, took, err := Call(context.Background(), c, "k", Func[string]{Load: func(context.Context, string) (string, error) {
			n++
			if n == 1 {
				return "", errBoom
			}
			<-time.After(3 * time.Second) // on the bubble's clock: no real wait
			return "v", nil
		}})
		if err != nil || took != 3*time.Second {
			t.Fatalf("Call = (%v, %v), want the second attempt's 3s and no error", took, err)
		}
	})
}

// TestCall_panicIsRecovered: a panicking loader is an error of stage
// "loader", made by Panicked, and counts as a load.
func TestCall_panicIsRecovered(t *testing.T) {
	c := newCaller(t, nil)
	_, _, err := Call(context.Background(), c, "k", Func[string]{Load: func(context.Context, string) (string, error) { panic("oops") }})
	var pe *panicError
	if !errors.As(err, &pe) || pe.stage != "loader" || pe.v != "oops" {
		t.Fatalf("err = %v, want the panic of stage loader with oops", err)
	}
	if n := c.Loads.Load(); n != 1 {
		t.Errorf("Loads = %d, want 1", n)
	}
}

// TestCall_attemptTimeout: an attempt that runs out of its Timeout ends
// with an error that matches ErrTimeout and the context's deadline, at
// the timeout, whether the loader heeds its context or not; a loader that
// does not finishes on its own, and what it returns is dropped.
func TestCall_attemptTimeout(t *testing.T) {
	for _, heeds := range []bool{true, false} {
		t.Run(fmt.Sprintf("loader heeds its context %v", heeds), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCaller(t, nil)
				c.Timeout = time.Second
				release := make(chan struct{})
				var finished atomic.Bool
				load := Func[string]{Load: func(ctx context.Context, _ string) (string, error) {
					defer finished.Store(true)
					if heeds {
						<-ctx.Done()
						return "", ctx.Err()
					}
					<-release
					return "late", nil
				}}
				start := time.Now()
				v, _, err := Call(context.Background(), c, "k", load)
				if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || v != "" {
					t.Fatalf("Call = (%q, %v), want no value and ErrTimeout, DeadlineExceeded", v, err)
				}
				if got := Classify(err, isPanic); got != TimedOut {
					t.Errorf("class %d, want TimedOut", got)
				}
				if d := time.Since(start); d != time.Second {
					t.Errorf("Call returned after %v, want at the 1s timeout", d)
				}
				close(release)
				synctest.Wait()
				if !finished.Load() {
					t.Error("the loader's goroutine did not finish")
				}
			})
		})
	}
}

// TestCall_attemptTimeout_answeredInTime: a loader that returns before
// the attempt's timeout is answered as it returned: its value, or its own
// error, which is no timeout.
func TestCall_attemptTimeout_answeredInTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCaller(t, nil)
		c.Timeout = time.Minute
		var calls atomic.Int32
		if v, _, err := Call(context.Background(), c, "k", counting(&calls, nil)); v != "v:k" || err != nil {
			t.Errorf("Call = (%q, %v), want (v:k, nil)", v, err)
		}
		if _, _, err := Call(context.Background(), c, "k", counting(&calls, errBoom)); err != errBoom {
			t.Errorf("err = %v, want the loader's errBoom", err)
		}
	})
}

// TestCall_callersDeadlineIsNotTheAttempts: a caller's deadline shorter
// than the attempt's timeout ends the attempt with the caller's
// DeadlineExceeded, not ErrTimeout, and the breaker counts it neither way.
func TestCall_callersDeadlineIsNotTheAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := withBreaker(t, newCaller(t, nil), 1)
		c.Timeout = time.Minute
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, _, err := Call(ctx, c, "k", Func[string]{Load: func(ctx context.Context, _ string) (string, error) {
			<-ctx.Done()
			return "", ctx.Err()
		}})
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrTimeout) {
			t.Fatalf("err = %v, want the caller's DeadlineExceeded, not ErrTimeout", err)
		}
		if got := Classify(err, isPanic); got != Deadline {
			t.Errorf("class %d, want Deadline", got)
		}
		if s := c.Breaker.State(); s != breaker.Closed {
			t.Errorf("breaker %v after the caller's deadline, want closed", s)
		}
	})
}

// TestCall_breakerSeesEveryAttempt: each attempt goes through the breaker;
// once it opens, the attempt it refuses does not run, is not counted as a
// load, and ends the retries.
func TestCall_breakerSeesEveryAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := withBreaker(t, newCaller(t, fastRetry(5)), 2)
		var calls atomic.Int32
		load := counting(&calls, errBoom)
		_, _, err := Call(context.Background(), c, "k", load)
		// Attempts 1 and 2 fail and open the breaker; attempt 3 is refused
		// and ends the retries, though two attempts remain.
		if !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("err = %v, want breaker.ErrOpen", err)
		}
		if n := calls.Load(); n != 2 {
			t.Errorf("loader calls = %d, want 2", n)
		}
		if n := c.Loads.Load(); n != 2 {
			t.Errorf("Loads = %d, want 2: a refused attempt is no load", n)
		}
		if _, _, err := Call(context.Background(), c, "k", load); !errors.Is(err, breaker.ErrOpen) || calls.Load() != 2 {
			t.Errorf("a call to the open breaker: %v after %d loader calls, want ErrOpen after 2", err, calls.Load())
		}
	})
}

// TestCall_retry: what each loader error makes of the retries, through
// Call, with three attempts.
func TestCall_retry(t *testing.T) {
	tests := []struct {
		name    string
		outs    []error
		calls   int32
		wantErr error
	}{
		{"fails twice then succeeds", []error{errBoom, errBoom, nil}, 3, nil},
		{"transient", []error{errBoom}, 3, errBoom},
		{"not found", []error{cache.ErrNotFound}, 1, cache.ErrNotFound},
		{"permanent", []error{backoff.Permanent(errBoom)}, 1, errBoom},
		{"loader's own canceled", []error{context.Canceled}, 1, context.Canceled},
		{"loader's own deadline", []error{context.DeadlineExceeded}, 1, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCaller(t, fastRetry(3))
				var calls atomic.Int32
				v, _, err := Call(context.Background(), c, "k", counting(&calls, tt.outs...))
				if err != tt.wantErr {
					t.Errorf("err = %#v, want %#v", err, tt.wantErr)
				}
				if tt.wantErr == nil && v != "v:k" {
					t.Errorf("value = %q, want v:k", v)
				}
				if n := calls.Load(); n != tt.calls {
					t.Errorf("loader calls = %d, want %d", n, tt.calls)
				}
			})
		})
	}
}

// TestCall_retry_attemptTimeoutIsRetried: each attempt has its own
// Timeout, and an attempt that runs out of it is retried.
func TestCall_retry_attemptTimeoutIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCaller(t, fastRetry(3))
		c.Timeout = time.Second
		var calls atomic.Int32
		_, _, err := Call(context.Background(), c, "k", Func[string]{Load: func(ctx context.Context, _ string) (string, error) {
			calls.Add(1)
			<-ctx.Done()
			return "", ctx.Err()
		}})
		if !errors.Is(err, ErrTimeout) {
			t.Errorf("err = %v, want ErrTimeout", err)
		}
		if n := calls.Load(); n != 3 {
			t.Errorf("loader calls = %d, want 3: an attempt's timeout is retried", n)
		}
	})
}

// TestCall_retry_answersAreNotRetried: an error that IsFailure says is not
// a failure is an answer, and is not retried; a failure is.
func TestCall_retry_answersAreNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errAnswer := errors.New("no such user")
		c := newCaller(t, fastRetry(3))
		c.IsFailure = func(err error) bool { return !errors.Is(err, errAnswer) }
		var calls atomic.Int32
		if _, _, err := Call(context.Background(), c, "k", counting(&calls, errAnswer)); err != errAnswer || calls.Load() != 1 {
			t.Fatalf("an answer: %v after %d loader calls, want the answer after 1", err, calls.Load())
		}
		calls.Store(0)
		if _, _, err := Call(context.Background(), c, "k", counting(&calls, errBoom)); err != errBoom || calls.Load() != 3 {
			t.Fatalf("a failure: %v after %d loader calls, want errBoom after 3", err, calls.Load())
		}
	})
}

// TestCall_callersDeadline_loaderIgnoresContext: a caller's deadline
// shorter than the attempt's timeout ends the attempt at that deadline,
// with the caller's error, even when the loader does not heed its
// context.
func TestCall_callersDeadline_loaderIgnoresContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCaller(t, nil)
		c.Timeout = time.Minute
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		release := make(chan struct{})
		start := time.Now()
		_, _, err := Call(ctx, c, "k", Func[string]{Load: func(context.Context, string) (string, error) {
			<-release
			return "late", nil
		}})
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrTimeout) {
			t.Fatalf("err = %v, want the caller's DeadlineExceeded, not ErrTimeout", err)
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("Call returned after %v, want at the caller's 1s deadline", d)
		}
		close(release)
	})
}

// TestCall_telemetry: each attempt is a load span with its number, marked
// an error unless it found the value or its absence, and one count of the
// loads metric by outcome; an attempt the breaker refuses is a span that
// says so, and no load.
func TestCall_telemetry(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	c := withBreaker(t, newCallerWith(t, nil, telemetry.Config{TracerProvider: tp, MeterProvider: mp}), 2)

	ctx := context.Background()
	loads := []Func[string]{
		{Load: func(context.Context, string) (string, error) { return "", cache.ErrNotFound }},
		{Load: func(context.Context, string) (string, error) { return "", errBoom }},
		{Load: func(context.Context, string) (string, error) { panic("oops") }},   // the second failure opens the breaker
		{Load: func(context.Context, string) (string, error) { return "v", nil }}, // refused
	}
	for _, fn := range loads {
		_, _, _ = Call(ctx, c, "k", fn)
	}

	spans := rec.Ended()
	if len(spans) != len(loads) {
		t.Fatalf("%d spans, want %d", len(spans), len(loads))
	}
	wantStatus := []codes.Code{codes.Unset, codes.Error, codes.Error, codes.Unset}
	for i, sp := range spans {
		if sp.Name() != telemetry.SpanLoad || sp.Status().Code != wantStatus[i] {
			t.Errorf("span %d: %s with status %v, want %s with %v", i, sp.Name(), sp.Status().Code, telemetry.SpanLoad, wantStatus[i])
		}
		attrs := attribute.NewSet(sp.Attributes()...)
		if v, ok := attrs.Value(telemetry.Attempt); !ok || v.AsInt64() != 1 {
			t.Errorf("span %d: attempt %v, want 1", i, v.AsInt64())
		}
		if v, _ := attrs.Value(telemetry.BreakerState); i == 3 && v.AsString() != breaker.Open.String() {
			t.Errorf("refused span: breaker state %q, want %q", v.AsString(), breaker.Open.String())
		}
	}
	if ev := spans[3].Events(); len(ev) != 1 || ev[0].Name != "breaker refused the call" {
		t.Errorf("refused span: events %v, want the refusal", ev)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == telemetry.MetricLoads {
				for _, dp := range sum.DataPoints {
					o, _ := dp.Attributes.Value(telemetry.Outcome)
					got[o.AsString()] += dp.Value
				}
			}
		}
	}
	if want := map[string]int64{"not_found": 1, "error": 1, "panic": 1}; !maps.Equal(got, want) {
		t.Errorf("%s by outcome = %v, want %v", telemetry.MetricLoads, got, want)
	}
	if n := c.Loads.Load(); n != 3 {
		t.Errorf("Loads = %d, want 3", n)
	}
}
