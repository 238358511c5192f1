package loadcall

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/telemetry"
)

// TestCallMany_keyErrorsFailOnlyTheirKeys: the per-key errors a batch's
// loader returns fail those keys only, beside the values it found, and
// the call counts as a success for the breaker.
func TestCallMany_keyErrorsFailOnlyTheirKeys(t *testing.T) {
	c := withBreaker(t, newCaller(t, nil), 1)
	vals, errs, _, err := CallMany(context.Background(), c, []string{"a", "b"}, func(context.Context, []string) (map[string]int, error) {
		return map[string]int{"a": 1}, keyErrs{"b": errBoom}
	})
	if err != nil {
		t.Fatalf("err = %v, want none: the key errors are the keys'", err)
	}
	if !maps.Equal(vals, map[string]int{"a": 1}) || len(errs) != 1 || errs["b"] != errBoom {
		t.Fatalf("CallMany = %v, %v; want a=1 and b failed with errBoom", vals, errs)
	}
	if s := c.Breaker.State(); s != breaker.Closed {
		t.Errorf("breaker %v after key errors, want closed: the call succeeded", s)
	}
}

func TestCallMany_error(t *testing.T) {
	c := newCaller(t, nil)
	vals, errs, _, err := CallMany(context.Background(), c, []string{"a"}, func(context.Context, []string) (map[string]int, error) {
		return map[string]int{"a": 1}, errBoom
	})
	if err != errBoom || vals != nil || errs != nil {
		t.Fatalf("CallMany = %v, %v, %v; want errBoom and nothing else", vals, errs, err)
	}
}

// TestCallMany_retryAnswersWithTheLastAttempt: with Retry, each attempt
// gets the keys as the caller gave them, and the values are those of the
// attempt that succeeded.
func TestCallMany_retryAnswersWithTheLastAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCaller(t, fastRetry(3))
		keys := []string{"a", "b"}
		var got [][]string
		vals, errs, _, err := CallMany(context.Background(), c, keys, func(_ context.Context, ks []string) (map[string]int, error) {
			got = append(got, slices.Clone(ks))
			n := len(got)
			ks[0] = "changed by the loader"
			if n < 3 {
				return map[string]int{"a": n}, errBoom
			}
			return map[string]int{"a": n, "b": n}, nil
		})
		if err != nil || errs != nil || !maps.Equal(vals, map[string]int{"a": 3, "b": 3}) {
			t.Fatalf("CallMany = %v, %v, %v; want the third attempt's a=3 b=3", vals, errs, err)
		}
		for i, ks := range got {
			if !slices.Equal(ks, []string{"a", "b"}) {
				t.Errorf("attempt %d got keys %v, want [a b]", i+1, ks)
			}
		}
		if !slices.Equal(keys, []string{"a", "b"}) {
			t.Errorf("the caller's keys are now %v: the loader changed them", keys)
		}
	})
}

// TestCallMany_keyErrorsAreNotRetried: a loader that failed some keys
// answered: the call is not tried again.
func TestCallMany_keyErrorsAreNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCaller(t, fastRetry(3))
		calls := 0
		_, errs, _, err := CallMany(context.Background(), c, []string{"a"}, func(context.Context, []string) (map[string]int, error) {
			calls++
			return nil, keyErrs{"a": errBoom}
		})
		if err != nil || !errors.Is(errs["a"], errBoom) || calls != 1 {
			t.Fatalf("CallMany: errs %v, err %v after %d calls; want a failed, after 1 call", errs, err, calls)
		}
	})
}

// TestCallMany_lateAttemptDoesNotAnswer: an attempt abandoned at its
// timeout whose loader ignores its context does not replace the answer
// of the attempt after it, even when it returns between that answer and
// the end of the call (here: while the call records its load metric,
// whose exemplar filter runs on the caller's goroutine).
func TestCallMany_lateAttemptDoesNotAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		late := make(chan struct{})
		answered := false
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()),
			sdkmetric.WithExemplarFilter(func(context.Context) bool {
				if answered {
					answered = false
					close(late)
					synctest.Wait() // the first attempt has returned
				}
				return false
			}))
		c := newCallerWith(t, fastRetry(2), telemetry.Config{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: mp})
		c.Timeout = time.Second
		var n atomic.Int32 // the attempts run on goroutines of their own
		vals, _, _, err := CallMany(context.Background(), c, []string{"a"}, func(context.Context, []string) (map[string]int, error) {
			if n.Add(1) == 1 {
				<-late // past its timeout: abandoned
				return map[string]int{"a": 1}, nil
			}
			answered = true
			return map[string]int{"a": 2}, nil
		})
		if err != nil || !maps.Equal(vals, map[string]int{"a": 2}) {
			t.Fatalf("CallMany = %v, %v; want the second attempt's a=2", vals, err)
		}
	})
}

// TestOne: the loader of one key made of a batch's loader answers with
// the key's value, its own error among the per-key errors (another key's
// is not its), the batch's error, or ErrNotFound for a key left out.
func TestOne(t *testing.T) {
	c := newCaller(t, nil)
	errOther := errors.New("another key's")
	for _, tc := range []struct {
		name string
		vals map[string]int
		err  error
		want int
		werr error
	}{
		{"value", map[string]int{"k": 7}, nil, 7, nil},
		{"left out", map[string]int{}, nil, 0, cache.ErrNotFound},
		{"its key error", nil, keyErrs{"k": errBoom}, 0, errBoom},
		{"another key's error", map[string]int{"k": 7}, keyErrs{"x": errOther}, 7, nil},
		{"the batch's error", nil, errBoom, 0, errBoom},
	} {
		var asked []string
		one := One(c, func(_ context.Context, keys []string) (map[string]int, error) {
			asked = keys
			return tc.vals, tc.err
		})
		v, err := one(context.Background(), "k")
		if v != tc.want || !errors.Is(err, tc.werr) || (tc.werr == nil && err != nil) || !slices.Equal(asked, []string{"k"}) {
			t.Errorf("%s: One = %v, %v after asking %v; want %v, %v after asking [k]", tc.name, v, err, asked, tc.want, tc.werr)
		}
	}
}
