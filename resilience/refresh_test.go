package resilience

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/telemetry"
)

// TestStaleWhileRevalidate_withRedis_refreshesOnceAcrossPipelines: two
// pipelines on one Redis (two processes' worth: own clients, own L1) serve
// the stale copy at once, and one background load, in one of them, brings
// the new value to both.
func TestStaleWhileRevalidate_withRedis_refreshesOnceAcrossPipelines(t *testing.T) {
	srv := redistest.Start(t)
	pod := func() *Pipeline[string] {
		return build(t, New[string]("swr-redis").Cache(50*time.Millisecond).Jitter(0).Stale(time.Hour).
			StaleWhileRevalidate().Redis(srv.Client()).Lock(LockSettings{Poll: 20 * time.Millisecond}))
	}
	a, b := pod(), pod()
	c := &counter{}
	ctx := context.Background()
	if _, err := a.Get(ctx, "k", c.load); err != nil {
		t.Fatal(err)
	}
	if r, err := b.GetResult(ctx, "k", c.load); err != nil || r.Source != SourceL2 {
		t.Fatalf("b before expiry: %+v %v, want L2", r, err)
	}
	c.fn = func(int64) (string, error) { return "new", nil }
	// The refresh waits until every caller has been served the stale copy.
	c.gate = make(chan struct{})
	// Both L1s answer until the TTL has passed (their entries expire
	// together: b's came from a's write); the first call after it gets the
	// stale copy and starts the refresh.
	waitFor(t, func() bool {
		r, err := a.GetResult(ctx, "k", c.load)
		if err != nil || r.Value != "v:k" {
			t.Fatalf("a before the refresh: %+v %v", r, err)
		}
		return r.Source == SourceStale
	})
	var wg sync.WaitGroup
	for _, p := range []*Pipeline[string]{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := p.GetResult(ctx, "k", c.load)
			if err != nil || r.Source != SourceStale || r.Value != "v:k" {
				t.Errorf("after expiry: %+v %v, want the stale copy at once", r, err)
			}
		}()
	}
	wg.Wait()
	close(c.gate)
	// The new value reaches both. Its TTL is short enough to pass while
	// this waits on a busy machine, and a refresh it calls for then must
	// not count: it goes to another loader.
	later := &counter{fn: func(int64) (string, error) { return "new", nil }}
	for _, p := range []*Pipeline[string]{a, b} {
		waitFor(t, func() bool {
			r, _ := p.GetResult(ctx, "k", later.load)
			return r.Value == "new"
		})
	}
	if got := c.calls.Load(); got != 2 {
		t.Fatalf("loader calls = %d, want 2 (the first load and one refresh for both pipelines)", got)
	}
}

// TestEarlyRefresh_withRedis_oneRefreshAcrossPipelines: two pipelines on
// one Redis both decide to refresh a hot key early; one load, under the
// lock, serves both, and the other pipeline's refresh takes its value.
func TestEarlyRefresh_withRedis_oneRefreshAcrossPipelines(t *testing.T) {
	srv := redistest.Start(t)
	rec := newTelRec(t)
	pod := func(tp trace.TracerProvider) *Pipeline[string] {
		// A beta this large makes every hit refresh early.
		p, err := New[string]("early").Cache(time.Minute).EarlyRefresh(1e9).
			Redis(srv.Client()).Lock(LockSettings{Poll: 20 * time.Millisecond}).TracerProvider(tp).Build()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// b's spans are recorded, to see its refresh wait at the lock.
	a, b := pod(tracenoop.NewTracerProvider()), pod(rec.tp)
	c := &counter{delay: time.Millisecond}
	ctx := context.Background()
	if _, err := a.Get(ctx, "k", c.load); err != nil {
		t.Fatal(err)
	}
	if r, err := b.GetResult(ctx, "k", c.load); err != nil || r.Source != SourceL2 {
		t.Fatalf("b: %+v %v, want the value from L2", r, err)
	}
	c.fn = func(int64) (string, error) { return "new", nil }
	c.gate = make(chan struct{})
	// a's hit starts a refresh, whose load waits at the gate holding the
	// lock; b's hit starts one too, which must wait for a's.
	if r, err := a.GetResult(ctx, "k", c.load); err != nil || r.Source != SourceL1 || r.Value != "v:k" {
		t.Fatalf("a's hit: %+v %v", r, err)
	}
	waitFor(t, func() bool { return c.calls.Load() >= 2 })
	if r, err := b.GetResult(ctx, "k", c.load); err != nil || r.Source != SourceL1 || r.Value != "v:k" {
		t.Fatalf("b's hit: %+v %v", r, err)
	}
	// b's refresh finds the lock held by a's and waits for its value.
	waitFor(t, func() bool { return rec.startedNamed(telemetry.SpanLockWait) > 0 || c.calls.Load() > 2 })
	close(c.gate)
	// Close waits for the refreshes.
	if err := errors.Join(a.Close(), b.Close()); err != nil {
		t.Fatal(err)
	}
	if got := c.calls.Load(); got != 2 {
		t.Fatalf("loader calls = %d, want 2: the first load and one early refresh for both pipelines", got)
	}
}
