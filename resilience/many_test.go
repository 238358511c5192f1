package resilience

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/rscript"
)

// batchLoader is a LoadManyFunc that records each call's keys and answers
// "v:<key>" for every key but those in missing.
type batchLoader struct {
	mu      sync.Mutex
	calls   [][]string
	missing map[string]bool
	fail    error
	keyErrs KeyErrors
	gate    chan struct{} // when set, each call waits for it to close
	started chan struct{} // when set, closed by the first call
	once    sync.Once
}

func (l *batchLoader) load(ctx context.Context, keys []string) (map[string]string, error) {
	l.mu.Lock()
	l.calls = append(l.calls, slices.Clone(keys))
	l.mu.Unlock()
	if l.started != nil {
		l.once.Do(func() { close(l.started) })
	}
	if l.gate != nil {
		select {
		case <-l.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if l.fail != nil {
		return nil, l.fail
	}
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		if !l.missing[k] && l.keyErrs[k] == nil {
			out[k] = "v:" + k
		}
	}
	if len(l.keyErrs) > 0 {
		return out, l.keyErrs
	}
	return out, nil
}

func (l *batchLoader) snapshot() [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

func sources[V any](rs map[string]Result[V]) map[string]int {
	out := map[string]int{}
	for _, r := range rs {
		out[r.Source.String()]++
	}
	return out
}

func TestGetMany_embedded_oneLoadForTheMisses(t *testing.T) {
	p := build(t, New[string]("many-embedded").Cache(time.Minute).SingleFlight())
	ctx := context.Background()
	l := &batchLoader{missing: map[string]bool{"gone": true}}
	if _, err := p.Get(ctx, "warm", func(context.Context, string) (string, error) { return "v:warm", nil }); err != nil {
		t.Fatal(err)
	}
	rs, err := p.GetMany(ctx, []string{"warm", "a", "b", "a", "gone", "b"}, l.load)
	if err != nil {
		t.Fatalf("GetMany: %v", err)
	}
	calls := l.snapshot()
	if len(calls) != 1 || !slices.Equal(calls[0], []string{"a", "b", "gone"}) {
		t.Fatalf("loader calls %v, want one with [a b gone]", calls)
	}
	if len(rs) != 4 {
		t.Fatalf("%d results, want 4 (duplicates answered once): %v", len(rs), rs)
	}
	for k, want := range map[string]Source{"warm": SourceL1, "a": SourceLoader, "b": SourceLoader} {
		if r := rs[k]; r.Source != want || r.Value != "v:"+k {
			t.Errorf("%s: %+v, want v:%s from %v", k, r, k, want)
		}
	}
	if r := rs["gone"]; !r.NotFound || r.Source != SourceLoader {
		t.Errorf("gone: %+v, want NotFound from the loader", r)
	}
	// Again: the values from L1, the not-found (no NegativeTTL) loaded again.
	rs, err = p.GetMany(ctx, []string{"a", "b", "gone"}, l.load)
	if err != nil {
		t.Fatal(err)
	}
	if s := sources(rs); s["l1"] != 2 {
		t.Errorf("second call: sources %v, want a and b from l1", s)
	}
	if calls := l.snapshot(); len(calls) != 2 || !slices.Equal(calls[1], []string{"gone"}) {
		t.Errorf("loader calls %v, want a second with [gone] only", calls)
	}
}

// TestGetMany_chunks: a call of more than GetManyChunk misses loads them
// a chunk at a time, one loader call each, in the order asked, and
// answers every key.
func TestGetMany_chunks(t *testing.T) {
	for _, name := range []string{"embedded", "redis"} {
		t.Run(name, func(t *testing.T) {
			b := New[string]("many-chunks").Cache(time.Minute)
			if name == "redis" {
				b = b.Redis(redistest.Start(t).Client()).Lock(LockSettings{})
			}
			p := build(t, b)
			keys := make([]string, 2*GetManyChunk+1)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%05d", i)
			}
			l := &batchLoader{}
			rs, err := p.GetMany(context.Background(), keys, l.load)
			if err != nil {
				t.Fatal(err)
			}
			if s := sources(rs); s["loader"] != len(keys) {
				t.Errorf("sources %v, want %d keys from the loader", s, len(keys))
			}
			calls := l.snapshot()
			var sizes []int
			for _, c := range calls {
				sizes = append(sizes, len(c))
			}
			if !slices.Equal(sizes, []int{GetManyChunk, GetManyChunk, 1}) || !slices.Equal(slices.Concat(calls...), keys) {
				t.Errorf("loader calls of %v keys, want %d, %d and 1, in the order asked", sizes, GetManyChunk, GetManyChunk)
			}
		})
	}
}

func TestGetMany_arguments(t *testing.T) {
	p := build(t, New[string]("many-args").Cache(time.Minute))
	ctx := context.Background()
	l := &batchLoader{}
	if _, err := p.GetMany(ctx, []string{"a", ""}, l.load); !errors.Is(err, ErrEmptyKey) {
		t.Errorf("empty key: %v, want ErrEmptyKey", err)
	}
	if _, err := p.GetMany(ctx, []string{"a"}, nil); !errors.Is(err, ErrNilLoader) {
		t.Errorf("nil loader: %v, want ErrNilLoader", err)
	}
	//lint:ignore SA1012 a nil context is what is tested
	if _, err := p.GetMany(nil, []string{"a"}, l.load); !errors.Is(err, ErrNilContext) { //nolint:staticcheck
		t.Errorf("nil ctx: %v, want ErrNilContext", err)
	}
	if rs, err := p.GetMany(ctx, nil, l.load); err != nil || len(rs) != 0 {
		t.Errorf("no keys: %v %v, want an empty map", rs, err)
	}
	if len(l.snapshot()) != 0 {
		t.Errorf("the loader ran: %v", l.snapshot())
	}
	_ = p.Close()
	if _, err := p.GetMany(ctx, []string{"a"}, l.load); !errors.Is(err, ErrClosed) {
		t.Errorf("closed: %v, want ErrClosed", err)
	}
}

func TestGetMany_negativeTTL(t *testing.T) {
	p := build(t, New[string]("many-neg").Cache(time.Minute).NegativeTTL(time.Minute))
	ctx := context.Background()
	l := &batchLoader{missing: map[string]bool{"gone": true}}
	for range 2 {
		rs, err := p.GetMany(ctx, []string{"a", "gone"}, l.load)
		if err != nil {
			t.Fatal(err)
		}
		if !rs["gone"].NotFound {
			t.Fatalf("gone: %+v, want NotFound", rs["gone"])
		}
	}
	if calls := l.snapshot(); len(calls) != 1 {
		t.Errorf("loader calls %v, want 1: the not-found is cached", calls)
	}
}

func TestGetMany_fallbacks(t *testing.T) {
	ctx := context.Background()
	cause := errors.New("db down")
	p := build(t, New[string]("many-fb").Cache(time.Minute).Jitter(0).Stale(time.Hour).DefaultValue("dflt"))
	// A stale copy of "old": stored with a TTL already past.
	p.l1.Set("old", p.newEntry("v:old-stale", false, 0, 0))
	e, _ := p.l1.Lookup("old")
	stale := *e
	stale.Expires = time.Now().Add(-time.Second)
	p.l1.Set("old", stale)

	l := &batchLoader{fail: cause}
	rs, err := p.GetMany(ctx, []string{"old", "new"}, l.load)
	if err != nil {
		t.Fatalf("GetMany: %v", err)
	}
	if r := rs["old"]; r.Source != SourceStale || r.Value != "v:old-stale" || !errors.Is(r.Cause, cause) {
		t.Errorf("old: %+v, want the stale copy with the cause", r)
	}
	if r := rs["new"]; r.Source != SourceDefault || r.Value != "dflt" {
		t.Errorf("new: %+v, want the default", r)
	}
	if calls := l.snapshot(); len(calls) != 1 {
		t.Errorf("loader calls %v, want 1", calls)
	}

	// One key failing alone: it falls back, the others load.
	kerr := errors.New("row locked")
	l2 := &batchLoader{keyErrs: KeyErrors{"x": kerr}}
	rs, err = p.GetMany(ctx, []string{"x", "y"}, l2.load)
	if err != nil {
		t.Fatalf("GetMany: %v", err)
	}
	if r := rs["x"]; r.Source != SourceDefault || !errors.Is(r.Cause, kerr) {
		t.Errorf("x: %+v, want the default for its own error", r)
	}
	if r := rs["y"]; r.Source != SourceLoader || r.Value != "v:y" {
		t.Errorf("y: %+v, want loaded", r)
	}

	// Without a fallback, the failed keys are in KeyErrors.
	q := build(t, New[string]("many-nofb").Cache(time.Minute))
	l3 := &batchLoader{keyErrs: KeyErrors{"x": kerr}}
	rs, err = q.GetMany(ctx, []string{"x", "y"}, l3.load)
	var ke KeyErrors
	if !errors.As(err, &ke) || len(ke) != 1 || !errors.Is(ke["x"], kerr) || !errors.Is(err, kerr) {
		t.Fatalf("err %v, want KeyErrors{x: row locked}", err)
	}
	if rs["y"].Value != "v:y" || rs["x"].Source != SourceNone {
		t.Errorf("results %+v", rs)
	}
}

// GetMany joins a Get's load of a key, and a Get joins GetMany's.
func TestGetMany_joinsLoadsInFlight(t *testing.T) {
	p := build(t, New[string]("many-join").Cache(time.Minute).SingleFlight())
	ctx := context.Background()

	gate := make(chan struct{})
	started := make(chan struct{})
	var getLoads atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		v, err := p.Get(ctx, "a", func(ctx context.Context, key string) (string, error) {
			getLoads.Add(1)
			close(started)
			<-gate
			return "get:" + key, nil
		})
		if err != nil || v != "get:a" {
			t.Errorf("Get: %q %v", v, err)
		}
	})
	<-started
	l := &batchLoader{}
	done := make(chan map[string]Result[string])
	go func() {
		rs, err := p.GetMany(ctx, []string{"a", "b"}, l.load)
		if err != nil {
			t.Errorf("GetMany: %v", err)
		}
		done <- rs
	}()
	// GetMany's own load of b runs while a is still loading.
	waitFor(t, func() bool { return len(l.snapshot()) == 1 })
	close(gate)
	rs := <-done
	wg.Wait()
	if calls := l.snapshot(); len(calls) != 1 || !slices.Equal(calls[0], []string{"b"}) {
		t.Errorf("loadMany calls %v, want one with [b]", calls)
	}
	if r := rs["a"]; r.Value != "get:a" || r.Source != SourceCoalesced {
		t.Errorf("a: %+v, want the Get's value, coalesced", r)
	}

	// The other way: a Get joins GetMany's load.
	lm := &batchLoader{gate: make(chan struct{}), started: make(chan struct{})}
	go func() {
		if _, err := p.GetMany(ctx, []string{"c", "d"}, lm.load); err != nil {
			t.Errorf("GetMany: %v", err)
		}
	}()
	<-lm.started
	got := make(chan Result[string])
	go func() {
		r, err := p.GetResult(ctx, "d", func(context.Context, string) (string, error) {
			getLoads.Add(1)
			return "get:d", nil
		})
		if err != nil {
			t.Errorf("Get: %v", err)
		}
		got <- r
	}()
	waitFor(t, func() bool { return p.group.Waited("d") }) // a joiner waits on done
	close(lm.gate)
	if r := <-got; r.Value != "v:d" || r.Source != SourceCoalesced {
		t.Errorf("Get d: %+v, want GetMany's value, coalesced", r)
	}
	if n := getLoads.Load(); n != 1 {
		t.Errorf("Get's loader ran %d times, want 1 (only for a)", n)
	}
}

// A caller whose context ends leaves; the shared load goes on for a Get
// that joined it.
func TestGetMany_callerLeaves(t *testing.T) {
	p := build(t, New[string]("many-leave").Cache(time.Minute).SingleFlight())
	l := &batchLoader{gate: make(chan struct{}), started: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error)
	go func() {
		_, err := p.GetMany(ctx, []string{"a"}, l.load)
		res <- err
	}()
	<-l.started
	cancel()
	err := <-res
	var ke KeyErrors
	if !errors.As(err, &ke) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want KeyErrors with context.Canceled", err)
	}
	close(l.gate)
	waitFor(t, func() bool { _, f := p.l1.Lookup("a"); return f.String() == "fresh" })
}

// warmScripts runs one batch on keys of its own, so that Redis knows the
// scripts and a measured batch needs no EVAL after a NOSCRIPT.
func warmScripts(t *testing.T, p *Pipeline[string]) {
	t.Helper()
	if _, err := p.GetMany(context.Background(), []string{"warm-up-1", "warm-up-2"}, (&batchLoader{}).load); err != nil {
		t.Fatal(err)
	}
}

func manyPod(t *testing.T, srv *redistest.Server, name string, more func(*Builder[string]) *Builder[string]) (*Pipeline[string], *redistest.Trips) {
	t.Helper()
	c := srv.Client()
	tc := &redistest.Trips{}
	c.AddHook(tc)
	// These tests are about batches, not Redis timeouts: a generous
	// operation timeout keeps a loaded machine's delays from reading as
	// Redis failures.
	b := New[string](name).Cache(time.Minute).Redis(c).Lock(LockSettings{Poll: 50 * time.Millisecond}).
		RedisOptions(RedisOptions{OpTimeout: 5 * time.Second})
	if more != nil {
		b = more(b)
	}
	p := build(t, b)
	if err := p.notifier.(interface{ Ready(context.Context) error }).Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	return p, tc
}

// With Redis and Lock: one round trip looks at every missed key (value or
// lock), one writes every loaded value back; a second process reads them
// all in one round trip.
func TestGetMany_redis_roundTrips(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	p, tc := manyPod(t, srv, "many-trips", nil)
	keys := make([]string, 200)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%03d", i)
	}
	warmScripts(t, p)
	l := &batchLoader{}
	before := tc.RoundTrips.Load()
	rs, err := p.GetMany(ctx, keys, l.load)
	if err != nil {
		t.Fatal(err)
	}
	trips := tc.RoundTrips.Load() - before
	for k, r := range rs {
		if r.FailedOpen {
			t.Fatalf("%s failed open: %v", k, r.FailOpenCause)
		}
	}
	if s := sources(rs); s["loader"] != len(keys) {
		t.Fatalf("sources %v, want every key from the loader", s)
	}
	if calls := l.snapshot(); len(calls) != 1 || len(calls[0]) != len(keys) {
		t.Fatalf("%d loader calls, want 1 with every key", len(calls))
	}
	// The write-back's round trip may still be under way when a release
	// goes out on its own goroutine; none is needed here. Each runs batch
	// scripts of at most rscript.MaxKeys keys, at most rscript.Wave of
	// them per round trip.
	scripts := (len(keys) + rscript.MaxKeys - 1) / rscript.MaxKeys
	perPhase := int64((scripts + rscript.Wave - 1) / rscript.Wave)
	if trips != 2*perPhase {
		t.Errorf("cold batch: %d round trips, want %d (the look, the write-back, %d each)", trips, 2*perPhase, perPhase)
	}

	q, tq := manyPod(t, srv, "many-trips", nil)
	before = tq.RoundTrips.Load()
	rs, err = q.GetMany(ctx, keys, l.load)
	if err != nil {
		t.Fatal(err)
	}
	if s := sources(rs); s["l2"] != len(keys) {
		t.Errorf("second process: sources %v, want every key from l2", s)
	}
	if n := tq.RoundTrips.Load() - before; n != perPhase {
		t.Errorf("second process: %d round trips, want %d", n, perPhase)
	}
	if calls := l.snapshot(); len(calls) != 1 {
		t.Errorf("%d loader calls, want still 1", len(calls))
	}
	t.Logf("FIGURES GetMany, %d cold keys with Redis and Lock: %d round trips (look, write-back); warm from L2: %d", len(keys), trips, perPhase)
}

// Two processes ask the same keys while the first one loads: the second
// loads none of the first's keys, waits for them in one wait and is woken
// by the announcements.
func TestGetMany_redis_waitsForAnotherProcess(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	p, _ := manyPod(t, srv, "many-wait", nil)
	q, _ := manyPod(t, srv, "many-wait", nil)
	first := &batchLoader{gate: make(chan struct{}), started: make(chan struct{})}
	second := &batchLoader{}
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := p.GetMany(ctx, []string{"a", "b", "c"}, first.load); err != nil {
			t.Errorf("first: %v", err)
		}
	})
	<-first.started
	res := make(chan map[string]Result[string])
	go func() {
		rs, err := q.GetMany(ctx, []string{"a", "b", "c", "d"}, second.load)
		if err != nil {
			t.Errorf("second: %v", err)
		}
		res <- rs
	}()
	// The second process loads d (its own) while it waits for a, b, c.
	waitFor(t, func() bool { return len(second.snapshot()) == 1 })
	close(first.gate)
	rs := <-res
	wg.Wait()
	if calls := second.snapshot(); len(calls) != 1 || !slices.Equal(calls[0], []string{"d"}) {
		t.Errorf("second process's loader calls %v, want one with [d]", calls)
	}
	for _, k := range []string{"a", "b", "c"} {
		if r := rs[k]; r.Source != SourceWaited || r.Value != "v:"+k {
			t.Errorf("%s: %+v, want v:%s, waited", k, r, k)
		}
	}
}

// A holder that dies (its lock never released, never beating) is taken
// over by the batch's waiter, which loads its keys.
func TestGetMany_redis_takesOverADeadHolder(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	p, _ := manyPod(t, srv, "many-dead", func(b *Builder[string]) *Builder[string] {
		return b.Lock(LockSettings{Lease: 30 * time.Second, Heartbeat: 100 * time.Millisecond, Poll: 50 * time.Millisecond})
	})
	// A holder that took the lock of a and never beats: the lock package
	// straight, without a watchdog.
	lease, err := p.locker.TryAcquire(ctx, "a", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = lease // dead: never extended, never released
	q, _ := manyPod(t, srv, "many-dead", nil)
	l := &batchLoader{}
	rs, err := q.GetMany(ctx, []string{"a", "b"}, l.load)
	if err != nil {
		t.Fatal(err)
	}
	if r := rs["a"]; r.Value != "v:a" || r.Source != SourceLoader {
		t.Errorf("a: %+v, want loaded after the takeover", r)
	}
	if calls := l.snapshot(); len(calls) != 2 {
		t.Errorf("loader calls %v, want [b] then [a]", calls)
	}
	// The load of a began while the dead holder's lock said its load ran.
	if n := q.Stats().DuplicateLoads; n != 1 {
		t.Errorf("DuplicateLoads = %d, want 1 (a, loaded after the takeover)", n)
	}
}

// Redis gone: every key loaded by this process in one call, failed open.
func TestGetMany_redis_failsOpen(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	p, _ := manyPod(t, srv, "many-open", func(b *Builder[string]) *Builder[string] {
		return b.RedisOptions(RedisOptions{OpTimeout: 200 * time.Millisecond})
	})
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	l := &batchLoader{}
	rs, err := p.GetMany(ctx, []string{"a", "b", "c"}, l.load)
	if err != nil {
		t.Fatalf("GetMany: %v", err)
	}
	for k, r := range rs {
		if r.Value != "v:"+k || !r.FailedOpen || r.FailOpenCause == nil || r.Source != SourceLoader {
			t.Errorf("%s: %+v, want loaded, failed open", k, r)
		}
	}
	if calls := l.snapshot(); len(calls) != 1 || len(calls[0]) != 3 {
		t.Errorf("loader calls %v, want one with every key", calls)
	}
}

// Redis without Lock: one read for the misses, one write-back.
func TestGetMany_redisWithoutLock(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := srv.Client()
	tc := &redistest.Trips{}
	c.AddHook(tc)
	p := build(t, New[string]("many-nolock").Cache(time.Minute).Redis(c))
	warmScripts(t, p)
	l := &batchLoader{}
	before := tc.RoundTrips.Load()
	if _, err := p.GetMany(ctx, []string{"a", "b", "c"}, l.load); err != nil {
		t.Fatal(err)
	}
	if n := tc.RoundTrips.Load() - before; n != 2 {
		t.Errorf("%d round trips, want 2", n)
	}
	q := build(t, New[string]("many-nolock").Cache(time.Minute).Redis(srv.Client()))
	rs, err := q.GetMany(ctx, []string{"a", "b", "c"}, l.load)
	if err != nil {
		t.Fatal(err)
	}
	if s := sources(rs); s["l2"] != 3 {
		t.Errorf("sources %v, want every key from l2", s)
	}
}

// One span for the batch, with the count of keys per source, and one child
// per round trip and loader call: none per key.
func TestGetMany_span(t *testing.T) {
	srv := redistest.Start(t)
	r := newTelRec(t)
	p, _ := manyPod(t, srv, "many-span", func(b *Builder[string]) *Builder[string] { return b.TracerProvider(r.tp) })
	ctx := context.Background()
	if _, err := p.Get(ctx, "a", func(context.Context, string) (string, error) { return "v:a", nil }); err != nil {
		t.Fatal(err)
	}
	l := &batchLoader{missing: map[string]bool{"gone": true}}
	root := r.call("test", func(ctx context.Context) {
		if _, err := p.GetMany(ctx, []string{"a", "b", "c", "gone"}, l.load); err != nil {
			t.Fatal(err)
		}
	})
	got := r.tree(t, root)
	want := "resilience.get_many [herdguard.keys.failed=0 herdguard.keys.failed_open=0 herdguard.keys.l1=1 herdguard.keys.loader=3 herdguard.keys=4 herdguard.pipeline=many-span]\n" +
		"  resilience.l2 (client) [db.operation.name=EVALSHA db.system.name=redis herdguard.keys.hit=0 herdguard.keys=3]\n" +
		"  resilience.load [herdguard.attempt=1]\n" +
		"  resilience.writeback (client) [db.operation.name=EVALSHA db.system.name=redis herdguard.keys=2]\n"
	if got != want {
		t.Errorf("spans:\n%s\nwant:\n%s", got, want)
	}
}

// A batch's wait for a key that a live holder keeps ends with the batch's
// shared load, at FlightTimeout, the key answered with that deadline's
// error: it does not wait on until MaxWait, nor load the key then.
func TestGetMany_waitEndsWithTheFlight(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	p, _ := manyPod(t, srv, "many-flight-end", func(b *Builder[string]) *Builder[string] {
		return b.Lock(LockSettings{Poll: 50 * time.Millisecond, MaxWait: 4 * time.Second}).
			Timeout(100 * time.Millisecond).FlightTimeout(300 * time.Millisecond)
	})
	// A live holder: the lock package straight, beating.
	lease, err := p.locker.TryAcquire(ctx, "a", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lease.KeepAlive(ctx, nil)
	defer func() { _ = lease.Release(ctx) }()
	l := &batchLoader{}
	start := time.Now()
	_, err = p.GetMany(ctx, []string{"a"}, l.load)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("GetMany returned after %v; want about FlightTimeout (300ms), well before MaxWait (4s)", took)
	}
	var ke KeyErrors
	if !errors.As(err, &ke) || !errors.Is(ke["a"], context.DeadlineExceeded) {
		t.Errorf("err %v; want a's KeyErrors entry to be the flight's deadline", err)
	}
	if calls := l.snapshot(); len(calls) != 0 {
		t.Errorf("loader calls %v; want none: a live holder has the key", calls)
	}
}

// A batch's holder that loads for six of its beats is slow, not dead: its
// one watchdog beats for every lease of the batch, and another process's
// GetMany of the same keys waits for its values instead of taking the
// keys over.
func TestGetMany_liveBatchHolderWaitedFor(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	s := LockSettings{Lease: 3 * time.Second, MaxWait: 30 * time.Second,
		Heartbeat: 250 * time.Millisecond, Poll: 10 * time.Millisecond}
	more := func(b *Builder[string]) *Builder[string] { return b.Lock(s) }
	holder, _ := manyPod(t, srv, "many-live", more)
	waiter, _ := manyPod(t, srv, "many-live", more)
	keys := []string{"a", "b", "c"}
	var calls atomic.Int32
	started := make(chan struct{})
	load := func(ctx context.Context, ks []string) (map[string]string, error) {
		if calls.Add(1) == 1 {
			close(started)
		}
		slow := time.NewTimer(1500 * time.Millisecond)
		defer slow.Stop()
		select {
		case <-slow.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		m := make(map[string]string, len(ks))
		for _, k := range ks {
			m[k] = "v:" + k
		}
		return m, nil
	}
	held := make(chan error, 1)
	go func() {
		_, err := holder.GetMany(ctx, keys, load)
		held <- err
	}()
	<-started
	rs, err := waiter.GetMany(ctx, keys, load)
	if err != nil {
		t.Fatalf("waiter: %v", err)
	}
	for _, k := range keys {
		if r := rs[k]; r.Value != "v:"+k || r.Source != SourceWaited {
			t.Errorf("%s: %+v; want the holder's value, waited for", k, r)
		}
	}
	if err := <-held; err != nil {
		t.Errorf("holder: %v", err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("loader calls = %d; want 1: a live holder is waited for", n)
	}
}
