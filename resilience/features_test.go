package resilience

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/internal/coord"
	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/rkey"
)

// This file holds one behaviour test per public feature of the builder
// that has no test of its own elsewhere.

// TestEarlyRefresh_hotKeyRefreshedBeforeExpiry: with a large beta, a hit
// on a fresh key serves the cached value at once and reloads it in the
// background, long before it expires; with early refresh off, hits never
// reload a fresh key.
func TestEarlyRefresh_hotKeyRefreshedBeforeExpiry(t *testing.T) {
	ctx := context.Background()
	t.Run("on", func(t *testing.T) {
		// A beta this large puts every hit "near expiry": the refresh is
		// due at once, with the value an hour from expiring.
		p := build(t, New[string]("early-on").Cache(time.Hour).Jitter(0).EarlyRefresh(1e9))
		c := &counter{delay: time.Millisecond} // a load time to scale by
		if _, err := p.Get(ctx, "k", c.load); err != nil {
			t.Fatal(err)
		}
		c.fn = func(int64) (string, error) { return "new", nil }
		r, err := p.GetResult(ctx, "k", c.load)
		if err != nil || r.Source != SourceL1 || r.Value != "v:k" {
			t.Fatalf("hit that starts the refresh: %+v %v; want the cached value from L1 at once", r, err)
		}
		waitFor(t, func() bool {
			r, err := p.GetResult(ctx, "k", c.load)
			return err == nil && r.Source == SourceL1 && r.Value == "new"
		})
		if n := c.calls.Load(); n < 2 {
			t.Fatalf("loader calls = %d, want the first load and at least one refresh", n)
		}
	})
	t.Run("off", func(t *testing.T) {
		p, err := New[string]("early-off").Cache(time.Hour).Jitter(0).Build()
		if err != nil {
			t.Fatal(err)
		}
		c := &counter{delay: time.Millisecond}
		for i := range 100 {
			r, err := p.GetResult(ctx, "k", c.load)
			want := []Source{SourceLoader, SourceL1}[min(i, 1)]
			if err != nil || r.Source != want || r.Value != "v:k" {
				t.Fatalf("call %d: %+v %v, want %v", i, r, err, want)
			}
		}
		// Close waits for any background refresh: none may have run.
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if n := c.calls.Load(); n != 1 {
			t.Fatalf("loader calls = %d, want 1: without EarlyRefresh a fresh key is not reloaded", n)
		}
	})
}

type ctxKey struct{}

// TestDefault_fnSeesCallAndCause: Default's fn gets the caller's context,
// the key and the loader's error; its value is served with Source default
// and the cause; its error is returned when it fails; its panic becomes a
// *PanicError of stage "default". A served default is not cached.
func TestDefault_fnSeesCallAndCause(t *testing.T) {
	errDB := errors.New("db down")
	errNoDefault := errors.New("no default for this key")
	var (
		mu     sync.Mutex
		gotCtx any
		gotKey string
		gotErr error
		calls  int
	)
	p := build(t, New[string]("default-fn").Cache(time.Minute).
		Default(func(ctx context.Context, key string, cause error) (string, error) {
			mu.Lock()
			gotCtx, gotKey, gotErr = ctx.Value(ctxKey{}), key, cause
			calls++
			mu.Unlock()
			switch key {
			case "fails":
				return "", errNoDefault
			case "panics":
				panic("default boom")
			}
			return "default for " + key, nil
		}))
	ctx := context.WithValue(context.Background(), ctxKey{}, "caller's value")
	failing := &counter{fn: func(int64) (string, error) { return "", errDB }}

	r, err := p.GetResult(ctx, "k", failing.load)
	if err != nil || r.Value != "default for k" || r.Source != SourceDefault || !r.FellBack() {
		t.Fatalf("loader failed: %+v %v; want the default's value from SourceDefault", r, err)
	}
	if !errors.Is(r.Cause, errDB) {
		t.Fatalf("Cause = %v, want the loader's error", r.Cause)
	}
	mu.Lock()
	if gotCtx != "caller's value" || gotKey != "k" || !errors.Is(gotErr, errDB) {
		t.Errorf("fn called with ctx value %v, key %q, cause %v; want the caller's ctx, k, the loader's error", gotCtx, gotKey, gotErr)
	}
	mu.Unlock()

	r, err = p.GetResult(ctx, "fails", failing.load)
	if !errors.Is(err, errNoDefault) || r.Source == SourceDefault || r.Value != "" {
		t.Fatalf("default failed: %+v %v; want its error and no value", r, err)
	}

	_, err = p.Get(ctx, "panics", failing.load)
	var pe *PanicError
	if !errors.As(err, &pe) || pe.Stage != "default" || pe.Value != "default boom" {
		t.Fatalf("default panicked: %v, want a *PanicError of stage default", err)
	}

	// The default is not cached: once the loader works, its value is served.
	ok := &counter{}
	if r, err := p.GetResult(ctx, "k", ok.load); err != nil || r.Source != SourceLoader || r.Value != "v:k" {
		t.Fatalf("after the loader recovered: %+v %v; want the loader's value", r, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 3 {
		t.Fatalf("default called %d times, want 3 (not when the loader works)", calls)
	}
}

// TestIsFailure_answersPassThrough_failuresGoToBreakerRetryFallback: an
// error that IsFailure says is not a failure is returned as it is: not
// retried, not counted by the breaker (which stays closed after many), not
// answered by the fallback. A failure is retried, counted (the breaker
// opens) and answered by the fallback.
func TestIsFailure_answersPassThrough_failuresGoToBreakerRetryFallback(t *testing.T) {
	errAnswer := errors.New("no such user")
	errDB := errors.New("db down")
	var defaults atomic.Int64
	const name = "is-failure"
	p := build(t, New[string](name).Cache(time.Minute).
		Breaker(breaker.Settings{Failures: 3, OpenTimeout: time.Hour}).
		Retry(RetrySettings{MaxAttempts: 3, Initial: time.Millisecond, Max: time.Millisecond}).
		Default(func(context.Context, string, error) (string, error) {
			defaults.Add(1)
			return "default", nil
		}).
		IsFailure(func(err error) bool { return !errors.Is(err, errAnswer) }))
	ctx := context.Background()

	answers := &counter{fn: func(int64) (string, error) { return "", errAnswer }}
	const n = 20
	for i := range n {
		r, err := p.GetResult(ctx, fmt.Sprintf("a%d", i), answers.load)
		if !errors.Is(err, errAnswer) || r.Source != SourceNone || r.Cause != nil {
			t.Fatalf("answer %d: %+v %v; want the loader's error as it is", i, r, err)
		}
	}
	if got := answers.calls.Load(); got != n {
		t.Fatalf("loader calls for %d answers = %d: answers must not be retried", n, got)
	}
	if got := defaults.Load(); got != 0 {
		t.Fatalf("default called %d times for answers", got)
	}
	if got := p.Health().Breakers[name]; got != breaker.Closed {
		t.Fatalf("breaker %v after %d answers, want closed: answers do not count", got, n)
	}

	failures := &counter{fn: func(int64) (string, error) { return "", errDB }}
	r, err := p.GetResult(ctx, "f", failures.load)
	if err != nil || r.Source != SourceDefault || !errors.Is(r.Cause, errDB) {
		t.Fatalf("failure: %+v %v; want the default, for the loader's error", r, err)
	}
	if got := failures.calls.Load(); got != 3 {
		t.Fatalf("loader calls for a failure = %d, want 3 attempts", got)
	}
	if got := p.Health().Breakers[name]; got != breaker.Open {
		t.Fatalf("breaker %v after 3 failed attempts, want open", got)
	}
	// The open breaker now refuses even calls that would be answers.
	before := answers.calls.Load()
	if r, err := p.GetResult(ctx, "a-late", answers.load); err != nil || r.Source != SourceDefault || !coord.IsRefusal(r.Cause) {
		t.Fatalf("open breaker: %+v %v; want the default for the refusal", r, err)
	}
	if answers.calls.Load() != before {
		t.Fatal("loader called through an open breaker")
	}
}

// TestMaxEntries_boundsL1: after many more keys than MaxEntries are
// loaded, at most MaxEntries of them are still served from L1.
func TestMaxEntries_boundsL1(t *testing.T) {
	const bound, keys = 100, 1000
	p := build(t, New[string]("bounded").Cache(time.Hour).MaxEntries(bound))
	ctx := context.Background()
	c := &counter{}
	for i := range keys {
		if _, err := p.Get(ctx, fmt.Sprintf("k%d", i), c.load); err != nil {
			t.Fatal(err)
		}
	}
	// Count the hits with a loader that fails, so that the misses do not
	// put anything back into L1 while counting.
	errDown := errors.New("down")
	failing := func(context.Context, string) (string, error) { return "", errDown }
	hits := 0
	for i := range keys {
		r, err := p.GetResult(ctx, fmt.Sprintf("k%d", i), failing)
		switch {
		case err == nil && r.Source == SourceL1:
			hits++
		case !errors.Is(err, errDown):
			t.Fatalf("key %d: %+v %v; want an L1 hit or the loader's error", i, r, err)
		}
	}
	if hits > bound || hits == 0 {
		t.Fatalf("%d of %d keys hit L1, want between 1 and MaxEntries (%d)", hits, keys, bound)
	}
	t.Logf("%d of %d keys still in L1 (MaxEntries %d)", hits, keys, bound)
}

// TestInvalidate_nextGetLoads: after Invalidate, the next Get calls the
// loader, in this pipeline (its L1) and in another one on the same Redis
// (the L2 key is gone).
func TestInvalidate_nextGetLoads(t *testing.T) {
	ctx := context.Background()
	t.Run("memory", func(t *testing.T) {
		p := build(t, New[string]("invalidate").Cache(time.Hour))
		c := &counter{}
		for _, want := range []Source{SourceLoader, SourceL1} {
			if r, err := p.GetResult(ctx, "k", c.load); err != nil || r.Source != want {
				t.Fatalf("before Invalidate: %+v %v, want %v", r, err, want)
			}
		}
		if err := p.Invalidate(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if r, err := p.GetResult(ctx, "k", c.load); err != nil || r.Source != SourceLoader {
			t.Fatalf("after Invalidate: %+v %v, want the loader", r, err)
		}
		if got := c.calls.Load(); got != 2 {
			t.Fatalf("loader calls = %d, want 2", got)
		}
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		raw := srv.Client()
		const name = "invalidate-redis"
		pod := func() *Pipeline[string] {
			return build(t, New[string](name).Cache(time.Hour).Redis(srv.Client()).Lock(LockSettings{}))
		}
		a, b := pod(), pod()
		c := &counter{}
		if r, err := a.GetResult(ctx, "k", c.load); err != nil || r.Source != SourceLoader {
			t.Fatalf("first Get: %+v %v", r, err)
		}
		key := rawValueKey(t, name, "k")
		if n, err := raw.Exists(ctx, key).Result(); err != nil || n != 1 {
			t.Fatalf("value key %s after the load: exists %d, %v; want it written", key, n, err)
		}
		if err := a.Invalidate(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		// What is left is a tombstone: a fence, no value.
		if has, err := raw.HExists(ctx, key, rkey.FieldData).Result(); err != nil || has {
			t.Fatalf("value key %s after Invalidate: value field present %v, %v; want none", key, has, err)
		}
		if r, err := b.GetResult(ctx, "k", c.load); err != nil || r.Source != SourceLoader {
			t.Fatalf("other pipeline after Invalidate: %+v %v, want the loader (L2 emptied)", r, err)
		}
		if r, err := a.GetResult(ctx, "k", c.load); err != nil || r.Source != SourceL2 {
			t.Fatalf("after Invalidate, once reloaded elsewhere: %+v %v, want L2 (L1 emptied)", r, err)
		}
		if got := c.calls.Load(); got != 2 {
			t.Fatalf("loader calls = %d, want 2", got)
		}
	})
}

// rawValueKey is the Redis key of key's value in pipeline name, for tests
// that look at Redis with a raw client.
func rawValueKey(t *testing.T, name, key string) string {
	t.Helper()
	ks, err := rkey.New(DefaultPrefix, name)
	if err != nil {
		t.Fatal(err)
	}
	return ks.Value(key)
}

// TestLock_liveHolderWaitedFor_upToMaxWait: two pipelines of one name on
// one Redis stand for two processes. A holder whose load outlasts two of
// its beats and many polls, but keeps beating, is waited for: one load in
// all. Past MaxWait, a waiter loads without the lock.
func TestLock_liveHolderWaitedFor_upToMaxWait(t *testing.T) {
	ctx := context.Background()
	t.Run("waited for", func(t *testing.T) {
		srv := redistest.Start(t)
		// The holder loads for six of its beats; it counts as dead only
		// after two silent ones, and the waiters poll every few
		// milliseconds.
		s := LockSettings{Lease: 3 * time.Second, MaxWait: 30 * time.Second,
			Heartbeat: 250 * time.Millisecond, Poll: 10 * time.Millisecond}
		const hold = 1500 * time.Millisecond
		pod := func() *Pipeline[string] {
			return build(t, New[string]("live-holder").Cache(time.Minute).Redis(srv.Client()).Lock(s))
		}
		holder, waiters := pod(), []*Pipeline[string]{pod(), pod()}
		c := &counter{delay: hold}
		held := make(chan Result[string], 1)
		go func() {
			r, err := holder.GetResult(ctx, "k", c.load)
			if err != nil {
				t.Errorf("holder: %v", err)
			}
			held <- r
		}()
		waitFor(t, func() bool { return c.calls.Load() == 1 })
		start := time.Now()
		var wg sync.WaitGroup
		for _, p := range waiters {
			for range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r, err := p.GetResult(ctx, "k", c.load)
					if err != nil || r.Value != "v:k" || (r.Source != SourceWaited && r.Source != SourceCoalesced) {
						t.Errorf("waiter: %+v %v; want the holder's value, waited for", r, err)
					}
				}()
			}
		}
		wg.Wait()
		waited := time.Since(start)
		if r := <-held; r.Source != SourceLoader {
			t.Fatalf("holder: %+v, want its own load", r)
		}
		if got := c.calls.Load(); got != 1 {
			t.Fatalf("loader calls = %d, want 1: a live holder is waited for", got)
		}
		if waited < 2*s.Heartbeat {
			t.Fatalf("waiters returned after %v, within two beats (%v): the holder's load cannot have been waited for", waited, 2*s.Heartbeat)
		}
		for _, p := range append(waiters, holder) {
			if n := p.Stats().DuplicateLoads; n != 0 {
				t.Fatalf("DuplicateLoads = %d, want 0: the holder was waited for", n)
			}
		}
	})
	t.Run("past MaxWait", func(t *testing.T) {
		srv := redistest.Start(t)
		// The default heartbeat (1 s) keeps the holder alive long past
		// MaxWait, so the waiter cannot take the lock over.
		s := LockSettings{MaxWait: 200 * time.Millisecond, Poll: 10 * time.Millisecond}
		pod := func() *Pipeline[string] {
			return build(t, New[string]("max-wait").Cache(time.Minute).Timeout(time.Minute).Redis(srv.Client()).Lock(s))
		}
		holder, waiter := pod(), pod()
		gate := make(chan struct{})
		var holderCalls, waiterCalls atomic.Int64
		held := make(chan error, 1)
		go func() {
			_, err := holder.Get(ctx, "k", func(ctx context.Context, _ string) (string, error) {
				holderCalls.Add(1)
				select {
				case <-gate:
					return "holder's", nil
				case <-ctx.Done():
					return "", ctx.Err()
				}
			})
			held <- err
		}()
		waitFor(t, func() bool { return holderCalls.Load() == 1 })
		start := time.Now()
		done := make(chan struct{})
		var r Result[string]
		var err error
		go func() {
			defer close(done)
			r, err = waiter.GetResult(ctx, "k", func(context.Context, string) (string, error) {
				waiterCalls.Add(1)
				return "waiter's", nil
			})
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second): // generous: MaxWait is 200 ms
			close(gate)
			<-done
			t.Fatalf("the waiter waited for a holder stuck past MaxWait (%v)", s.MaxWait)
		}
		waited := time.Since(start)
		close(gate)
		if err := <-held; err != nil {
			t.Fatalf("holder: %v", err)
		}
		if err != nil || r.Source != SourceLoader || r.Value != "waiter's" || r.FailedOpen {
			t.Fatalf("waiter past MaxWait: %+v %v; want its own load, not failed open", r, err)
		}
		if waiterCalls.Load() != 1 || holderCalls.Load() != 1 {
			t.Fatalf("loader calls: holder %d, waiter %d; want 1 each", holderCalls.Load(), waiterCalls.Load())
		}
		if h, w := holder.Stats().DuplicateLoads, waiter.Stats().DuplicateLoads; h != 0 || w != uint64(holderCalls.Load()+waiterCalls.Load()-1) {
			t.Fatalf("DuplicateLoads: holder %d, waiter %d; want 0 and the one load past the holder's", h, w)
		}
		if waited < s.MaxWait {
			t.Fatalf("the waiter loaded after %v, before MaxWait (%v)", waited, s.MaxWait)
		}
	})
}
