package resilience

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/stripe"
	"github.com/herdguard/herdguard/telemetry"
)

func wantStats(t *testing.T, name string, got, want Stats) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: Stats\n got %+v\nwant %+v", name, got, want)
	}
}

func TestStats_hitsMissesLoadsNotFoundErrors(t *testing.T) {
	p := build(t, New[string]("st").Cache(time.Minute).SingleFlight().NegativeTTL(time.Minute))
	ctx := context.Background()
	nf := func(context.Context, string) (string, error) { return "", ErrNotFound }
	wantStats(t, "new", p.Stats(), Stats{})
	if _, err := p.Get(ctx, "a", okLoad); err != nil {
		t.Fatal(err)
	}
	wantStats(t, "a load", p.Stats(), Stats{Misses: 1, Loaded: 1, Loads: 1})
	if _, err := p.Get(ctx, "a", okLoad); err != nil {
		t.Fatal(err)
	}
	if r, err := p.GetResult(ctx, "a", okLoad); err != nil || r.Source != SourceL1 {
		t.Fatalf("%+v, %v; want an L1 hit", r, err)
	}
	wantStats(t, "two hits", p.Stats(), Stats{L1Hits: 2, Misses: 1, Loaded: 1, Loads: 1})
	if _, err := p.GetResult(ctx, "nf", nf); !errors.Is(err, ErrNotFound) {
		t.Fatalf("err %v, want ErrNotFound", err)
	}
	if _, err := p.Get(ctx, "nf", nf); !errors.Is(err, ErrNotFound) {
		t.Fatalf("err %v, want ErrNotFound", err)
	}
	if _, err := p.GetResult(ctx, "nf", nf); !errors.Is(err, ErrNotFound) {
		t.Fatalf("err %v, want ErrNotFound", err)
	}
	wantStats(t, "not found", p.Stats(), Stats{L1Hits: 4, Misses: 2, Loaded: 2, NotFound: 3, Loads: 2})
	if _, err := p.Get(ctx, "e", failLoad); !errors.Is(err, errLoad) {
		t.Fatalf("err %v, want the loader's", err)
	}
	wantStats(t, "error", p.Stats(), Stats{L1Hits: 4, Misses: 3, Loaded: 2, NotFound: 3, Errors: 1, Loads: 3})
}

func TestStats_fallbacks(t *testing.T) {
	p := build(t, New[string]("st").Cache(30*time.Millisecond).Jitter(0).Stale(time.Hour).DefaultValue("dflt"))
	ctx := context.Background()
	if _, err := p.Get(ctx, "s", okLoad); err != nil {
		t.Fatal(err)
	}
	untilL1Stale(t, p, "s")
	if r, err := p.GetResult(ctx, "s", failLoad); err != nil || r.Source != SourceStale {
		t.Fatalf("%+v, %v; want the stale copy", r, err)
	}
	if r, err := p.GetResult(ctx, "d", failLoad); err != nil || r.Source != SourceDefault {
		t.Fatalf("%+v, %v; want the default", r, err)
	}
	wantStats(t, "fallbacks", p.Stats(), Stats{Misses: 3, Loaded: 1, Stale: 1, Defaults: 1, Fallbacks: 2, Loads: 3})

	swr := build(t, New[string]("swr").Cache(30*time.Millisecond).Jitter(0).Stale(time.Hour).StaleWhileRevalidate())
	if _, err := swr.Get(ctx, "s", okLoad); err != nil {
		t.Fatal(err)
	}
	untilL1Stale(t, swr, "s")
	if r, err := swr.GetResult(ctx, "s", okLoad); err != nil || r.Source != SourceStale {
		t.Fatalf("%+v, %v; want the stale copy", r, err)
	}
	waitFor(t, func() bool { return swr.Stats().Loads == 2 }) // the background refresh
	wantStats(t, "stale-while-revalidate", swr.Stats(), Stats{Misses: 2, Loaded: 1, Stale: 1, Loads: 2})
}

func TestStats_coalesced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := build(t, New[string]("st").Cache(time.Minute).SingleFlight())
		c := &counter{gate: make(chan struct{})}
		const n = 50
		var wg sync.WaitGroup
		results := make([]Result[string], n)
		for i := range n {
			wg.Go(func() { results[i], _ = p.GetResult(context.Background(), "k", c.load) })
		}
		// Every caller has joined the load or is blocked on it.
		synctest.Wait()
		if got := c.calls.Load(); got != 1 {
			t.Fatalf("%d loads under way, want 1", got)
		}
		close(c.gate)
		wg.Wait()
		by := map[Source]uint64{}
		for _, r := range results {
			by[r.Source]++
		}
		if by[SourceCoalesced] != n-1 {
			t.Fatalf("sources %v: want %d callers to join the load", by, n-1)
		}
		wantStats(t, "coalesced", p.Stats(), Stats{Misses: n, Loaded: 1, Coalesced: n - 1, Loads: 1})
	})
}

func TestStats_L2HitsWaitedFailedOpen(t *testing.T) {
	s := redistest.Start(t)
	rec := newTelRec(t) // podB's spans show when its wait is under way
	pod := func() *Builder[string] {
		return New[string]("st").Cache(time.Minute).Lock(LockSettings{Poll: 20 * time.Millisecond}).
			Redis(s.Client()).RedisOptions(RedisOptions{OpTimeout: 10 * time.Second})
	}
	podA, podB, podC := build(t, pod()), build(t, pod().TracerProvider(rec.tp)), build(t, pod())
	c := &counter{gate: make(chan struct{})}
	done := make(chan struct{}, 2)
	go func() { _, _ = podA.GetResult(context.Background(), "k", c.load); done <- struct{}{} }()
	waitFor(t, func() bool { return c.calls.Load() == 1 })
	go func() { _, _ = podB.GetResult(context.Background(), "k", c.load); done <- struct{}{} }()
	waitFor(t, func() bool { return rec.startedNamed(telemetry.SpanLockWait) == 1 })
	close(c.gate)
	for range 2 {
		<-done
	}
	if r, err := podC.GetResult(context.Background(), "k", c.load); err != nil || r.Source != SourceL2 {
		t.Fatalf("%+v, %v; want an L2 hit", r, err)
	}
	wantStats(t, "winner", podA.Stats(), Stats{Misses: 1, Loaded: 1, Loads: 1})
	wantStats(t, "waiter", podB.Stats(), Stats{Misses: 1, Waited: 1})
	wantStats(t, "L2 hit", podC.Stats(), Stats{Misses: 1, L2Hits: 1})

	dead := redistest.Start(t)
	p := build(t, New[string]("st").Cache(time.Minute).SingleFlight().Lock(LockSettings{}).
		Redis(dead.Client()).RedisOptions(RedisOptions{OpTimeout: 500 * time.Millisecond}))
	if err := dead.Kill(); err != nil {
		t.Fatal(err)
	}
	if r, err := p.GetResult(context.Background(), "k", okLoad); err != nil || !r.FailedOpen {
		t.Fatalf("%+v, %v; want failed open", r, err)
	}
	// A load without the lock, with Lock on, may duplicate another
	// process's: it counts.
	wantStats(t, "failed open", p.Stats(), Stats{Misses: 1, Loaded: 1, FailedOpen: 1, Loads: 1, DuplicateLoads: 1})
}

// An L1 hit counts once, whether it makes spans or not.
func TestStats_tracedHitCountsOnce(t *testing.T) {
	rec := newTelRec(t)
	p := build(t, New[string]("st").Cache(time.Minute).TracerProvider(rec.tp))
	telGet(t, context.Background(), p, "k", okLoad)
	rec.call("test", func(ctx context.Context) { telGet(t, ctx, p, "k", okLoad) })
	telGet(t, context.Background(), p, "k", okLoad)
	wantStats(t, "hits", p.Stats(), Stats{L1Hits: 2, Misses: 1, Loaded: 1, Loads: 1})
}

func TestStats_keylessDo(t *testing.T) {
	p := build(t, New[string]("st").Keyless().DefaultValue("dflt"))
	ctx := context.Background()
	if _, err := p.Do(ctx, func(context.Context) (string, error) { return "v", nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Do(ctx, func(context.Context) (string, error) { return "", errLoad }); err != nil {
		t.Fatal(err)
	}
	wantStats(t, "do", p.Stats(), Stats{Loaded: 1, Defaults: 1, Fallbacks: 1, Loads: 2})
}

// With an SDK sampling every span, an L1 hit makes spans only under a
// sampled caller's span, or when Config.HitSpans asks; other calls always
// do.
func TestTelemetry_L1Hit_spansOnlyWhenSampledOrAsked(t *testing.T) {
	rec := newTelRec(t)
	p := build(t, New[string]("tel").Cache(time.Minute).SingleFlight().TracerProvider(rec.tp))
	ctx := context.Background()
	telGet(t, ctx, p, "k", okLoad)
	if n := rec.startedNamed(telemetry.SpanGet); n != 1 {
		t.Fatalf("a miss started %d get spans, want 1", n)
	}
	telGet(t, ctx, p, "k", okLoad)
	if n, l1 := rec.startedNamed(telemetry.SpanGet), rec.startedNamed(telemetry.SpanL1); n != 1 || l1 != 1 {
		t.Fatalf("a hit with no caller span: %d get and %d l1 spans in all, want 1 and 1 (the miss's)", n, l1)
	}
	rec.call("test", func(ctx context.Context) { telGet(t, ctx, p, "k", okLoad) })
	if n, l1 := rec.startedNamed(telemetry.SpanGet), rec.startedNamed(telemetry.SpanL1); n != 2 || l1 != 2 {
		t.Fatalf("a hit under a sampled span: %d get and %d l1 spans in all, want 2 and 2", n, l1)
	}

	asked := newTelRec(t)
	q := build(t, New[string]("tel").Cache(time.Minute).Telemetry(telemetry.Config{TracerProvider: asked.tp, HitSpans: true}))
	telGet(t, ctx, q, "k", okLoad)
	telGet(t, ctx, q, "k", okLoad)
	if n, l1 := asked.startedNamed(telemetry.SpanGet), asked.startedNamed(telemetry.SpanL1); n != 2 || l1 != 2 {
		t.Fatalf("HitSpans: %d get and %d l1 spans, want 2 and 2", n, l1)
	}
}

// L1 hits bump stripes of the hit count picked at random, so that cores
// hitting at once, the same keys too, rarely write one cache line; the
// count stays exact, however many cores hit at once.
func TestStats_l1HitsStripedExact(t *testing.T) {
	p := build(t, New[string]("st").Cache(time.Minute))
	ctx := context.Background()
	const keys, workers, rounds = 64, 4, 50
	for i := range keys {
		if _, err := p.Get(ctx, fmt.Sprint("k", i), okLoad); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range rounds {
				for i := range keys {
					// Every worker walks the same keys in the same
					// order, as the cores hitting a hot key do.
					if _, err := p.Get(ctx, fmt.Sprint("k", i), okLoad); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	wantStats(t, "hits", p.Stats(), Stats{L1Hits: keys * workers * rounds, Misses: keys, Loaded: keys, Loads: keys})
	used := p.stats.L1Hits.Used()
	if used < stripe.Stripes/2 {
		t.Fatalf("%d hits counted in %d of the %d stripes; want them spread over half at least", keys*workers*rounds, used, stripe.Stripes)
	}
}

// A Get that takes over the lock of a holder that died (never beating,
// never releasing) loads a key whose load the lock said ran: it counts
// as a duplicate.
func TestStats_takeoverIsDuplicate(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	p, _ := manyPod(t, srv, "st-dead", nil)
	// A holder that took the lock and never beats: the lock package
	// straight, without a watchdog.
	lease, err := p.locker.TryAcquire(ctx, "k", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = lease // dead: never extended, never released
	q, _ := manyPod(t, srv, "st-dead", nil)
	if r, err := q.GetResult(ctx, "k", okLoad); err != nil || r.Source != SourceLoader {
		t.Fatalf("%+v, %v; want loaded after the takeover", r, err)
	}
	wantStats(t, "took over", q.Stats(), Stats{Misses: 1, Loaded: 1, Loads: 1, DuplicateLoads: 1})
}
