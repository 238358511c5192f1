package bench

import (
	"context"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/timeout"
	"github.com/sony/gobreaker/v2"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/resilience"
)

// work is the guarded call of the breaker benchmarks: it succeeds at once,
// so what is measured is the guard.
func work(context.Context) (string, error) { return "ok", nil }

// BenchmarkDoBreaker is a keyless call behind a circuit breaker and a
// 1-second timeout: the pipeline's Do beside failsafe-go's circuit
// breaker and timeout policies, and gobreaker's Execute, which has no
// timeout. The pipeline's timeout returns at the deadline even when the
// call ignores its context, so it runs the call on a goroutine of its
// own (without Timeout, a keyless call runs on the caller's goroutine);
// failsafe-go's cancels the call's context and waits for it to return.
func BenchmarkDoBreaker(b *testing.B) {
	ctx := context.Background()
	runContenders(b, []contender{
		{"pipeline.Do", func(b *testing.B) {
			p, err := resilience.New[string]("do").Keyless().Breaker(breaker.Settings{}).Timeout(time.Second).Build()
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = p.Close() })
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Do(ctx, work); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"failsafe.CircuitBreaker+Timeout", func(b *testing.B) {
			ex := failsafe.With[string](circuitbreaker.NewWithDefaults[string](), timeout.New[string](time.Second))
			fn := func(e failsafe.Execution[string]) (string, error) { return work(e.Context()) }
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ex.GetWithExecution(fn); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"gobreaker.Execute", func(b *testing.B) {
			cb := gobreaker.NewCircuitBreaker[string](gobreaker.Settings{Name: "bench"})
			fn := func() (string, error) { return work(ctx) }
			b.ReportAllocs()
			for b.Loop() {
				if _, err := cb.Execute(fn); err != nil {
					b.Fatal(err)
				}
			}
		}},
	})
}

// breakers are the contenders of a bare breaker around a call that
// succeeds: the breaker package's Execute beside gobreaker's own, which
// it wraps, so the ratio is the wrapper's cost. loop is the timed loop,
// serial or parallel.
func breakers(loop func(b *testing.B, call func() error)) []contender {
	ctx := context.Background()
	return []contender{
		{"breaker.Execute", func(b *testing.B) {
			br, err := breaker.New(breaker.Settings{Name: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			fn := func() error { _, err := work(ctx); return err }
			loop(b, func() error { return br.Execute(fn) })
		}},
		{"gobreaker.Execute", func(b *testing.B) {
			cb := gobreaker.NewCircuitBreaker[string](gobreaker.Settings{Name: "bench"})
			fn := func() (string, error) { return work(ctx) }
			loop(b, func() error { _, err := cb.Execute(fn); return err })
		}},
	}
}

// BenchmarkBreaker is the breaker package alone beside gobreaker, one
// caller at a time.
func BenchmarkBreaker(b *testing.B) {
	runContenders(b, breakers(func(b *testing.B, call func() error) {
		b.ReportAllocs()
		for b.Loop() {
			if err := call(); err != nil {
				b.Fatal(err)
			}
		}
	}))
}

// BenchmarkBreakerParallel is BenchmarkBreaker from every P at once. Both
// take gobreaker's mutex twice a call: the breaker package runs on it.
func BenchmarkBreakerParallel(b *testing.B) {
	runContenders(b, breakers(func(b *testing.B, call func() error) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := call(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}))
}
