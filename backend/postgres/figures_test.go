package postgres

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// figuresEnv turns the figures on: they take a while and assert nothing
// about time.
const figuresEnv = "HERDGUARD_FIGURES"

// counter is a pgx tracer that counts the statements sent: each is one
// round trip (statements are prepared once per connection, beforehand).
type counter struct{ n atomic.Int64 }

func (c *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// countedBackend returns a backend on a pool whose statements c counts.
func countedBackend(t *testing.T, f *fixture, c *counter) *Backend {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(server(t).DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = c
	cfg.MinConns = 2
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b, err := New(pool, f.o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// quantiles formats the median, 90th and 99th percentiles of ds.
func quantiles(ds []time.Duration) string {
	slices.Sort(ds)
	q := func(p float64) time.Duration { return ds[int(p*float64(len(ds)-1))] }
	return fmt.Sprintf("p50 %v p90 %v p99 %v (n=%d)", q(0.5).Round(time.Microsecond),
		q(0.9).Round(time.Microsecond), q(0.99).Round(time.Microsecond), len(ds))
}

// TestFigures_shared measures the backend's own operations: a cold miss
// as its winner makes it (look, lock, re-check, write back and release),
// an L2 hit, and the wake-up of a waiter in a second view (its own LISTEN connection,
// as another process's would be).
//
//	HERDGUARD_FIGURES=1 go test -count=1 -v -run TestFigures ./ | grep FIGURES
func TestFigures_shared(t *testing.T) {
	if os.Getenv(figuresEnv) == "" {
		t.Skip("set " + figuresEnv + "=1 to measure")
	}
	f := newFixture(t, Options{})
	var c counter
	b := countedBackend(t, f, &c)
	s := f.openOn(b, "figures", 0)
	other := f.open("figures", 0)
	ctx := testCtx(t)
	waitListening(t, s, other)
	until := time.Now().Add(time.Hour)
	const n = 300

	// Warm the pool and the prepared statements.
	for i := range 20 {
		coldMiss(ctx, t, s, fmt.Sprintf("warm:%d", i), until)
		_, _ = s.Load(ctx, fmt.Sprintf("warm:%d", i))
	}

	var cold, hit []time.Duration
	c.n.Store(0)
	for i := range n {
		t0 := time.Now()
		coldMiss(ctx, t, s, fmt.Sprintf("cold:%d", i), until)
		cold = append(cold, time.Since(t0))
	}
	trips := float64(c.n.Load()) / n
	for i := range n {
		t0 := time.Now()
		if v, err := s.Load(ctx, fmt.Sprintf("cold:%d", i)); err != nil || v == nil {
			t.Fatalf("L2 hit: %q, %v", v, err)
		}
		hit = append(hit, time.Since(t0))
	}

	var wake, save []time.Duration
	for i := range n {
		key := fmt.Sprintf("wake:%d", i)
		l, err := s.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		ch, unsub := other.Subscribe(key)
		t0 := time.Now()
		if _, err := s.Save(ctx, key, []byte("v"), backend.Save{Fence: l.Fence(), Token: l.Token(), Release: true, Until: until}); err != nil {
			t.Fatal(err)
		}
		save = append(save, time.Since(t0))
		select {
		case <-ch:
			wake = append(wake, time.Since(t0))
		case <-time.After(10 * time.Second):
			t.Fatal("waiter not woken")
		}
		l.Forget()
		unsub()
	}
	t.Logf("FIGURES postgres shared: cold miss (winner: Load, TryAcquire, Load, Save+Release): %s; %.1f round trips", quantiles(cold), trips)
	t.Logf("FIGURES postgres shared: L2 hit (Load): %s; 1 round trip", quantiles(hit))
	t.Logf("FIGURES postgres shared: write-back with release (Save+Release): %s", quantiles(save))
	t.Logf("FIGURES postgres shared: waiter woken in a second view, from the write-back sent: %s", quantiles(wake))
}

// coldMiss is a cold miss as its winner makes it.
func coldMiss(ctx context.Context, t *testing.T, s *shared, key string, until time.Time) {
	if v, err := s.Load(ctx, key); err != nil || v != nil {
		t.Fatalf("cold look: %q, %v", v, err)
	}
	l, err := s.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := s.Load(ctx, key); err != nil || v != nil {
		t.Fatalf("re-check: %q, %v", v, err)
	}
	if _, err := s.Save(ctx, key, []byte("value"), backend.Save{Fence: l.Fence(), Token: l.Token(), Release: true, Until: until}); err != nil {
		t.Fatal(err)
	}
	l.Forget()
}
