package resilience

import (
	"context"
	"errors"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/redistest"
)

// TestRedisBreaker_perKeyDataProblems_neverTripIt: values the codec
// cannot encode and foreign data at a key are that key's problem. They
// leave the Redis breaker closed, are not reported as failing open, and an
// unrelated pipeline on the same client keeps its L2.
func TestRedisBreaker_perKeyDataProblems_neverTripIt(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	tr := &transitions{}
	floats := build(t, New[float64]("floats").Cache(time.Minute).L1TTL(time.Millisecond).Redis(client).
		RedisOptions(RedisOptions{Breaker: breaker.Settings{Failures: 3}}).OnBreakerChange(tr.observe))
	ctx := context.Background()
	for i := range 20 {
		key := "nan" + string(rune('a'+i))
		r, err := floats.GetResult(ctx, key, func(context.Context, string) (float64, error) { return math.NaN(), nil })
		if err != nil || r.FailedOpen || !math.IsNaN(r.Value) {
			t.Fatalf("call %d, a value JSON cannot encode: %+v %v; want the value, not failed open", i, r, err)
		}
	}
	// Foreign data of the wrong type at the value key.
	if err := client.RPush(ctx, valueKey(t, "floats", "list"), "x").Err(); err != nil {
		t.Fatal(err)
	}
	// Five calls that get past L1 (its TTL is a millisecond) to the key.
	for past := 0; past < 5; {
		r, err := floats.GetResult(ctx, "list", func(context.Context, string) (float64, error) { return 1, nil })
		if err != nil || r.FailedOpen || r.Value != 1 {
			t.Fatalf("wrong type at the key: %+v %v; want the loader's value, not failed open", r, err)
		}
		if r.Source != SourceL1 {
			past++
		}
	}
	if got := tr.String(); got != "" {
		t.Fatalf("Redis breaker moved (%s): per-key data problems counted as Redis failures", got)
	}
	other := build(t, New[string]("other").Cache(time.Minute).Redis(client))
	if r, err := other.GetResult(ctx, "k", func(context.Context, string) (string, error) { return "v", nil }); err != nil || r.FailedOpen {
		t.Fatalf("unrelated pipeline: %+v %v", r, err)
	}
}

// TestRedisBreaker_perPipeline_settingsAndCallbacksApply: each pipeline
// gets the breaker it asked for and hears its own transitions; a shared
// breaker is heard by every pipeline using it.
func TestRedisBreaker_perPipeline_settingsAndCallbacksApply(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	trA, trB := &transitions{}, &transitions{}
	a := build(t, New[string]("a").Cache(time.Minute).Redis(client).
		RedisOptions(RedisOptions{Breaker: breaker.Settings{Failures: 50}}).OnBreakerChange(trA.observe))
	b := build(t, New[string]("b").Cache(time.Minute).Redis(client).
		RedisOptions(RedisOptions{Breaker: breaker.Settings{Failures: 1}}).OnBreakerChange(trB.observe))
	shared, err := breaker.New(breaker.Settings{Name: "redis", Failures: 1, OpenTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	trC, trD := &transitions{}, &transitions{}
	c := build(t, New[string]("c").Cache(time.Minute).Redis(client).RedisOptions(RedisOptions{SharedBreaker: shared}).OnBreakerChange(trC.observe))
	d := build(t, New[string]("d").Cache(time.Minute).Redis(client).RedisOptions(RedisOptions{SharedBreaker: shared}).OnBreakerChange(trD.observe))
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	load := func(context.Context, string) (string, error) { return "v", nil }
	for _, p := range []*Pipeline[string]{a, b, c} {
		if r, err := p.GetResult(ctx, "k", load); err != nil || !r.FailedOpen || r.FailOpenCause == nil {
			t.Fatalf("%s with Redis down: %+v %v; want failed open with its cause", p.Name(), r, err)
		}
	}
	if _, ok := trB.first("redis", breaker.Open, time.Time{}); !ok {
		t.Fatalf("b (Failures: 1) did not open after one failure: %s", trB)
	}
	if got := trA.String(); got != "" {
		t.Fatalf("a (Failures: 50) moved after one failure: %s", got)
	}
	_, okC := trC.first("redis", breaker.Open, time.Time{})
	_, okD := trD.first("redis", breaker.Open, time.Time{})
	if !okC || !okD {
		t.Fatalf("shared breaker opened by c: c heard %q, d heard %q; want both to hear it", trC, trD)
	}
	if r, _ := d.GetResult(ctx, "k", load); !errors.Is(r.FailOpenCause, breaker.ErrOpen) {
		t.Fatalf("d, on the open shared breaker: cause %v, want breaker.ErrOpen", r.FailOpenCause)
	}
}

// TestPipeline_buildClose_freesEverything builds and closes pipelines on
// one client: the heap stays flat, so nothing is kept per closed pipeline.
func TestPipeline_buildClose_freesEverything(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	cycle := func() {
		p, err := New[string]("cycle").Cache(time.Minute).Redis(client).Lock(LockSettings{}).Build()
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	for range 100 { // warm up: pools, scripts, caches of the runtime
		cycle()
	}
	before := heap()
	for range 1000 {
		cycle()
	}
	after := heap()
	// 1,000 cycles that each kept even a few kilobytes would add megabytes.
	if after > before+2<<20 {
		t.Fatalf("heap grew from %d to %d bytes over 1,000 build/close cycles", before, after)
	}
	t.Logf("FIGURES build_close: heap %d -> %d bytes over 1,000 cycles", before, after)
}

func TestBuild_typedNilClient_refused(t *testing.T) {
	var client *redis.Client
	_, err := New[string]("nil").Cache(time.Minute).Redis(client).Build()
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "Redis" {
		t.Fatalf("Build() with a typed-nil client = %v, want a ConfigError for Redis", err)
	}
}

// TestPanics_neverEscape: user code that panics (codec, Default, Retryable
// without single-flight, IsFailure, a breaker callback) becomes an error or
// is contained; the process goes on.
func TestPanics_neverEscape(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	errBoom := errors.New("boom")
	boom := func(context.Context, string) (string, error) { return "", errBoom }
	// theLoaders fails t unless err is the loader's own error: a hook's
	// panic is the hook's business, never the caller's.
	theLoaders := func(t *testing.T, what string, err error) {
		t.Helper()
		var pe *PanicError
		if !errors.Is(err, errBoom) || errors.As(err, &pe) {
			t.Fatalf("%s: %v, want the loader's error", what, err)
		}
	}
	t.Run("codec", func(t *testing.T) {
		p := build(t, New[string]("codec").Cache(time.Minute).Redis(srv.Client()).RedisOptions(RedisOptions{Codec: panicCodec{}}))
		if r, err := p.GetResult(ctx, "k", func(context.Context, string) (string, error) { return "v", nil }); err != nil || r.Value != "v" {
			t.Fatalf("panicking codec: %+v %v; want the loader's value", r, err)
		}
	})
	t.Run("default", func(t *testing.T) {
		p := build(t, New[string]("default").Cache(time.Minute).Default(func(context.Context, string, error) (string, error) { panic("default boom") }))
		_, err := p.Get(ctx, "k", boom)
		var pe *PanicError
		if !errors.As(err, &pe) || pe.Stage != "default" {
			t.Fatalf("panicking Default: %v, want a PanicError of stage default", err)
		}
	})
	t.Run("retryable without single-flight", func(t *testing.T) {
		p := build(t, New[string]("retryable").Cache(time.Minute).Retry(RetrySettings{
			MaxAttempts: 2, Retryable: func(error) bool { panic("retryable boom") }}))
		_, err := p.Get(ctx, "k", boom)
		theLoaders(t, "panicking Retryable", err)
	})
	t.Run("is failure", func(t *testing.T) {
		p := build(t, New[string]("isfailure").Cache(time.Minute).Breaker(breaker.Settings{}).IsFailure(func(error) bool { panic("isfailure boom") }))
		_, err := p.Get(ctx, "k", boom)
		theLoaders(t, "panicking IsFailure", err)
	})
	t.Run("breaker callback", func(t *testing.T) {
		p := build(t, New[string]("callback").Cache(time.Minute).Breaker(breaker.Settings{Failures: 1}).
			OnBreakerChange(func(string, breaker.State, breaker.State) { panic("callback boom") }))
		_, err := p.Get(ctx, "k", boom)
		theLoaders(t, "panicking OnBreakerChange", err)
	})
}

type panicCodec struct{}

func (panicCodec) Marshal(any) ([]byte, error) { panic("marshal boom") }
func (panicCodec) Unmarshal([]byte, any) error { panic("unmarshal boom") }

var _ cache.Codec = panicCodec{}

// TestKeySpace_pipelinesNeverShareKeys: pipeline "users" with key
// "admin:1" and pipeline "users:admin" with key "1" keep apart.
func TestKeySpace_pipelinesNeverShareKeys(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	a := build(t, New[string]("users").Cache(time.Minute).Redis(srv.Client()).Lock(LockSettings{}))
	b := build(t, New[string]("users:admin").Cache(time.Minute).Redis(srv.Client()).Lock(LockSettings{}))
	if v, err := a.Get(ctx, "admin:1", func(context.Context, string) (string, error) { return "a", nil }); err != nil || v != "a" {
		t.Fatal(v, err)
	}
	var called atomic.Bool
	v, err := b.Get(ctx, "1", func(context.Context, string) (string, error) { called.Store(true); return "b", nil })
	if err != nil || v != "b" || !called.Load() {
		t.Fatalf("pipeline users:admin key 1 = %q, %v, loader called %v; want its own value", v, err, called.Load())
	}
}

// TestClose_concurrentCallsWaitForWorkInFlight: every Close returns only
// once the load in flight has ended; calls after it are refused.
func TestClose_concurrentCallsWaitForWorkInFlight(t *testing.T) {
	p, err := New[string]("close").Cache(time.Minute).Build()
	if err != nil {
		t.Fatal(err)
	}
	c := &counter{gate: make(chan struct{})}
	var finished atomic.Bool // set by the loader as it returns
	load := func(ctx context.Context, key string) (string, error) {
		defer finished.Store(true)
		return c.load(ctx, key)
	}
	go func() { _, _ = p.Get(context.Background(), "k", load) }()
	waitFor(t, func() bool { return c.calls.Load() == 1 })
	var returned atomic.Int64
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			_ = p.Close()
			if !finished.Load() {
				returned.Add(1) // returned before the load ended
			}
		})
	}
	// Each Close has returned or is blocked inside: one that would return
	// early has had every chance to.
	waitFor(t, func() bool { return returned.Load() > 0 || blockedIn("resilience.(*Pipeline[...]).Close(") == 10 })
	close(c.gate)
	wg.Wait()
	if n := returned.Load(); n != 0 {
		t.Fatalf("%d of 10 Close calls returned before the load in flight ended", n)
	}
	if _, err := p.Get(context.Background(), "k2", c.load); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close = %v, want ErrClosed", err)
	}
	if err := p.Invalidate(context.Background(), "k"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Invalidate after Close = %v, want ErrClosed", err)
	}
	//lint:ignore SA1012 a nil context on purpose
	if err := p.Invalidate(nil, "k"); !errors.Is(err, ErrNilContext) {
		t.Fatalf("Invalidate(nil) = %v, want ErrNilContext", err)
	}
}

// TestRedisGuard_opTimeout_withAndWithoutDeadline: on a hung Redis (the
// server stopped with SIGSTOP, the client's own socket timeouts far
// longer), a call fails open after the operation timeout whether the
// caller's context has a deadline (the timeout travels with the command)
// or not (the batcher's own timeout, the same).
func TestRedisGuard_opTimeout_withAndWithoutDeadline(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(func(o *redis.Options) { o.ReadTimeout, o.WriteTimeout = time.Minute, time.Minute })
	p := build(t, New[string]("hung").Cache(time.Minute).Redis(rdb).
		RedisOptions(RedisOptions{OpTimeout: 100 * time.Millisecond}))
	if _, err := p.Get(context.Background(), "warm", func(context.Context, string) (string, error) { return "v", nil }); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Resume() }()
	long, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
	}{{"no deadline", context.Background()}, {"a minute's deadline", long}} {
		t0 := time.Now()
		r, err := p.GetResult(tc.ctx, "k-"+tc.name, func(_ context.Context, key string) (string, error) { return "v:" + key, nil })
		took := time.Since(t0)
		if err != nil || !r.FailedOpen || r.Value != "v:k-"+tc.name {
			t.Fatalf("%s: %+v, %v; want the loader's value, failed open", tc.name, r, err)
		}
		// A minute is what the client alone would wait; the operation
		// timeout is 100 ms.
		if took > 20*time.Second {
			t.Fatalf("%s: the call took %v on a hung Redis; want about the operation timeout", tc.name, took)
		}
		t.Logf("%s: failed open after %v", tc.name, took)
	}
}
