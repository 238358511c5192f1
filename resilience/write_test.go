package resilience

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/rlock"
)

// source is a loader over a value the test changes, like a database row.
// A load reads the row when it starts, then (if gated) waits for the gate:
// a slow query that read before a write.
type source struct {
	row     atomic.Value // string
	calls   atomic.Int64
	started chan struct{} // receives once per load, if not nil
	gate    chan struct{} // if not nil, loads wait for it to close
	ttl     time.Duration // if set, the loader calls SetTTL
	setTTL  atomic.Bool   // what SetTTL reported
}

func newSource(v string) *source {
	s := &source{}
	s.row.Store(v)
	return s
}

func (s *source) load(ctx context.Context, key string) (string, error) {
	s.calls.Add(1)
	v := s.row.Load().(string)
	if s.ttl > 0 {
		s.setTTL.Store(SetTTL(ctx, s.ttl))
	}
	if s.started != nil {
		s.started <- struct{}{}
	}
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return v, nil
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustGet(t *testing.T, p *Pipeline[string], key string, load LoadFunc[string]) Result[string] {
	t.Helper()
	r, err := p.GetResult(ctxT(t), key, load)
	if err != nil {
		t.Fatalf("%s: Get(%q): %v", p.Name(), key, err)
	}
	return r
}

// inFlight starts a Get whose load reads the row and then waits for the
// gate; it returns once the load has read, and a channel with the call's
// result.
func inFlight(t *testing.T, p *Pipeline[string], key string, s *source) <-chan Result[string] {
	t.Helper()
	ch := make(chan Result[string], 1)
	go func() {
		r, _ := p.GetResult(context.Background(), key, s.load)
		ch <- r
	}()
	select {
	case <-s.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the load did not start")
	}
	return ch
}

// TestWrites_withoutRedis: Set and Invalidate on the embedded default; a
// load that read the row before either does not fill L1 after it.
func TestWrites_withoutRedis_loadInFlightDoesNotFillL1(t *testing.T) {
	for _, op := range []string{"Set", "Invalidate"} {
		t.Run(op, func(t *testing.T) {
			p := build(t, New[string]("w-local").Cache(time.Minute).SingleFlight())
			s := newSource("old")
			s.started, s.gate = make(chan struct{}, 1), make(chan struct{})
			res := inFlight(t, p, "k", s)
			s.row.Store("new") // the write reaches the row, then the cache
			var err error
			if op == "Set" {
				err = p.Set(ctxT(t), "k", "new")
			} else {
				err = p.Invalidate(ctxT(t), "k")
			}
			if err != nil {
				t.Fatal(err)
			}
			close(s.gate)
			if r := <-res; r.Value != "old" {
				t.Fatalf("the load in flight returned %q, want what it read: old", r.Value)
			}
			s.started = nil
			r := mustGet(t, p, "k", s.load)
			if r.Value != "new" {
				t.Fatalf("after %s and the late load: Get = %q (%v), want new", op, r.Value, r.Source)
			}
			if want := map[string]Source{"Set": SourceL1, "Invalidate": SourceLoader}[op]; r.Source != want {
				t.Fatalf("after %s: source %v, want %v", op, r.Source, want)
			}
		})
	}
}

// redisPods returns n pipelines named name on their own clients of srv:
// n processes as far as Redis can tell.
func redisPods(t *testing.T, srv *redistest.Server, name string, n int, more func(*Builder[string]) *Builder[string]) []*Pipeline[string] {
	t.Helper()
	var ps []*Pipeline[string]
	for range n {
		b := New[string](name).Cache(time.Minute).Redis(srv.Client()).Lock(LockSettings{})
		if more != nil {
			b = more(b)
		}
		p := build(t, b)
		waitFor(t, func() bool { return p.Health().Subscribed })
		ps = append(ps, p)
	}
	return ps
}

// l1Value returns what p's L1 holds fresh for key.
func l1Value(p *Pipeline[string], key string) (string, bool) {
	e, f := p.l1.Lookup(key)
	if f != cache.Fresh {
		return "", false
	}
	return e.Value, true
}

// TestWrites_redis_reachOtherPipelinesAndLoadsInFlight: pipeline A's Set
// and Invalidate reach B's L1, and a holder on B that read the row
// before either cannot write its value back anywhere.
func TestWrites_redis_reachOtherPipelinesAndLoadsInFlight(t *testing.T) {
	srv := redistest.Start(t)
	for _, op := range []string{"Set", "Invalidate"} {
		t.Run(op, func(t *testing.T) {
			ps := redisPods(t, srv, "w-redis-"+op, 2, nil)
			a, b := ps[0], ps[1]
			s := newSource("v1")
			for _, p := range ps {
				mustGet(t, p, "cached", s.load)
			}
			if v, ok := l1Value(b, "cached"); !ok || v != "v1" {
				t.Fatalf("B's L1 = %q, %v", v, ok)
			}
			s.row.Store("v2")
			write := func(key string) {
				t.Helper()
				var err error
				if op == "Set" {
					err = a.Set(ctxT(t), key, "v2")
				} else {
					err = a.Invalidate(ctxT(t), key)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			write("cached")
			waitFor(t, func() bool { _, ok := l1Value(b, "cached"); return !ok })
			if r := mustGet(t, b, "cached", s.load); r.Value != "v2" {
				t.Fatalf("B after A's %s: %q (%v), want v2", op, r.Value, r.Source)
			}

			// A holder on B that read the row before the write.
			mustGet(t, a, "marker", s.load)
			s.row.Store("v3-old")
			slow := newSource("v3-old")
			slow.started, slow.gate = make(chan struct{}, 1), make(chan struct{})
			res := inFlight(t, b, "busy", slow)
			s.row.Store("v4")
			write("busy")
			close(slow.gate)
			<-res
			// B's writes are done when its call returns. A hears them in
			// the order B made them: once it hears B's next one, it has
			// heard any late write-back's announcement.
			if err := b.Invalidate(ctxT(t), "marker"); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { _, ok := l1Value(a, "marker"); return !ok })
			for i, p := range ps {
				r := mustGet(t, p, "busy", s.load)
				want := "v4"
				if op == "Set" {
					want = "v2" // what Set wrote
				}
				if r.Value != want {
					t.Fatalf("pipeline %d after the late load: %q (%v), want %s", i, r.Value, r.Source, want)
				}
			}
		})
	}
}

// TestInvalidate_redis_loadAfterwardsIsStored: the tombstone is a miss; a
// load after it takes the lock and its value lands in Redis for everyone.
func TestInvalidate_redis_loadAfterwardsIsStored(t *testing.T) {
	srv := redistest.Start(t)
	ps := redisPods(t, srv, "w-after", 2, nil)
	s := newSource("v1")
	mustGet(t, ps[0], "k", s.load)
	if err := ps[0].Invalidate(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	if _, found, err := ps[1].Peek(ctxT(t), "k"); found || err != nil {
		t.Fatalf("Peek after Invalidate = %v, %v; want a miss", found, err)
	}
	s.row.Store("v2")
	if r := mustGet(t, ps[1], "k", s.load); r.Value != "v2" || r.Source != SourceLoader {
		t.Fatalf("Get after Invalidate = %q (%v), want v2 from the loader", r.Value, r.Source)
	}
	v, found, err := ps[0].Peek(ctxT(t), "k")
	if err != nil || !found || v != "v2" {
		t.Fatalf("Peek on the other pipeline = %q, %v, %v; want v2 from Redis", v, found, err)
	}
	if n := s.calls.Load(); n != 2 {
		t.Fatalf("%d loads, want 2", n)
	}
}

// TestReconnect_dropsL1: a pipeline cut off from Redis while another
// invalidates a key it holds drops its L1 when its subscription comes
// back.
func TestReconnect_dropsL1(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	a := redisPods(t, srv, "w-reconnect", 1, nil)[0]
	cutClient := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = cutClient.Close() })
	b := build(t, New[string]("w-reconnect").Cache(time.Minute).Redis(cutClient).Lock(LockSettings{}))
	waitFor(t, func() bool { return b.Health().Subscribed })
	s := newSource("v1")
	mustGet(t, a, "k", s.load)
	mustGet(t, b, "k", s.load)
	mustGet(t, b, "other", s.load)
	before := b.writes.resubscribed.Load()

	proxy.Cut()
	if err := a.Invalidate(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	// B finds its subscription dead: no announcement reaches it now.
	within(t, 2*rlock.NotifierDeadAfter, "B's subscription found dead", func() bool { return !b.Health().Subscribed })
	if v, ok := l1Value(b, "k"); !ok || v != "v1" {
		t.Fatalf("B heard the invalidation through a cut link: L1 = %q, %v", v, ok)
	}
	proxy.Restore()
	within(t, 20*time.Second, "B re-subscribed after the link's return", func() bool { return b.writes.resubscribed.Load() != before })
	for _, key := range []string{"k", "other"} {
		if v, ok := l1Value(b, key); ok {
			t.Fatalf("B's L1 still holds %q = %q after re-subscribing", key, v)
		}
	}
}

func TestPeek_L1ThenRedis_noLoad(t *testing.T) {
	srv := redistest.Start(t)
	ps := redisPods(t, srv, "w-peek", 2, func(b *Builder[string]) *Builder[string] { return b.NegativeTTL(time.Second) })
	ctx := ctxT(t)
	if _, found, err := ps[0].Peek(ctx, "k"); found || err != nil {
		t.Fatalf("Peek of a cold key = %v, %v", found, err)
	}
	s := newSource("v1")
	mustGet(t, ps[0], "k", s.load)
	for i, p := range ps {
		v, found, err := p.Peek(ctx, "k")
		if err != nil || !found || v != "v1" {
			t.Fatalf("pipeline %d: Peek = %q, %v, %v", i, v, found, err)
		}
	}
	if _, ok := l1Value(ps[1], "k"); ok {
		t.Fatal("Peek filled L1")
	}
	_, _ = ps[0].Get(ctx, "none", func(context.Context, string) (string, error) { return "", ErrNotFound })
	if _, found, err := ps[1].Peek(ctx, "none"); found || !errors.Is(err, ErrNotFound) {
		t.Fatalf("Peek of a stored not-found = %v, %v; want ErrNotFound", found, err)
	}
	if n := s.calls.Load(); n != 1 {
		t.Fatalf("%d loads, want 1", n)
	}
}

func TestRefresh_reloadsAndStores(t *testing.T) {
	srv := redistest.Start(t)
	ps := redisPods(t, srv, "w-refresh", 2, nil)
	s := newSource("v1")
	mustGet(t, ps[0], "k", s.load)
	s.row.Store("v2")
	v, err := ps[0].Refresh(ctxT(t), "k", s.load)
	if err != nil || v != "v2" {
		t.Fatalf("Refresh = %q, %v", v, err)
	}
	if r := mustGet(t, ps[0], "k", s.load); r.Value != "v2" || r.Source != SourceL1 {
		t.Fatalf("Get after Refresh = %q (%v)", r.Value, r.Source)
	}
	if r := mustGet(t, ps[1], "k", s.load); r.Value != "v2" || r.Source != SourceL2 {
		t.Fatalf("other pipeline after Refresh = %q (%v)", r.Value, r.Source)
	}
	// Concurrent refreshes share one load.
	s.started, s.gate = make(chan struct{}, 8), make(chan struct{})
	errs := make(chan error, 4)
	for range 4 {
		go func() { _, err := ps[0].Refresh(ctxT(t), "k", s.load); errs <- err }()
	}
	<-s.started
	// The first call's load waits for the gate, the other three for it.
	waitFor(t, func() bool { return blockedIn("herdguard/internal/flight.(*Group[...]).Do(") == 4 })
	close(s.gate)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := s.calls.Load(); n != 3 {
		t.Fatalf("%d loads, want 3 (first, one Refresh, one shared Refresh)", n)
	}
}

func TestSetTTL_loaderSetsItsValuesTTL(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		set, want time.Duration
	}{
		{5 * time.Second, 5 * time.Second},
		{time.Millisecond, MinLoaderTTL}, // clamped up
		{time.Hour, time.Minute},         // clamped to the Cache ttl
	} {
		p := redisPods(t, srv, "w-ttl", 1, func(b *Builder[string]) *Builder[string] { return b.Jitter(0) })[0]
		s := newSource("v")
		s.ttl = tc.set
		key := tc.set.String()
		mustGet(t, p, key, s.load)
		if !s.setTTL.Load() {
			t.Fatal("SetTTL reported false inside a load")
		}
		e, _ := p.l1.Lookup(key)
		if got := e.Expires.Sub(e.Written); got != tc.want {
			t.Errorf("SetTTL(%v): L1 TTL %v, want %v", tc.set, got, tc.want)
		}
		le, _, err := p.l2.Get(ctxT(t), key)
		if err != nil {
			t.Fatal(err)
		}
		if got := le.Expires.Sub(le.Written); got != tc.want {
			t.Errorf("SetTTL(%v): Redis TTL %v, want %v", tc.set, got, tc.want)
		}
	}
	if SetTTL(context.Background(), time.Second) {
		t.Error("SetTTL outside a load reported true")
	}
}

func TestClone_callersGetCopies(t *testing.T) {
	p := build(t, New[[]int]("w-clone").Cache(time.Minute).Clone(func(v []int) []int { return append([]int(nil), v...) }))
	ctx := ctxT(t)
	load := func(context.Context, string) ([]int, error) { return []int{1, 2}, nil }
	got, _ := p.Get(ctx, "k", load)
	got[0] = 99
	for range 2 { // a miss's value and an L1 hit's
		v, _ := p.Get(ctx, "k", load)
		if v[0] != 1 {
			t.Fatalf("a caller's change reached the cache: %v", v)
		}
		v[0] = 98
	}
	r, _ := p.GetResult(ctx, "k", load)
	r.Value[0] = 97
	mine := []int{5}
	if err := p.Set(ctx, "s", mine); err != nil {
		t.Fatal(err)
	}
	mine[0] = 6
	if v, found, _ := p.Peek(ctx, "s"); !found || v[0] != 5 {
		t.Fatalf("Set kept the caller's slice: %v", v)
	}
	if _, err := New[[]int]("x").Clone(nil).Build(); err == nil {
		t.Error("Clone(nil) built")
	}
}

func TestWrites_badCalls(t *testing.T) {
	p := build(t, New[string]("w-bad").Cache(time.Minute))
	noCache := build(t, New[string]("w-nocache").SingleFlight())
	ctx := ctxT(t)
	load := newSource("v").load
	for name, err := range map[string]error{
		//lint:ignore SA1012 a nil context is what is tested
		"Set nil ctx":        p.Set(nil, "k", "v"),
		"Invalidate no key":  p.Invalidate(ctx, ""),
		"Set no cache":       noCache.Set(ctx, "k", "v"),
		"Invalidate nocache": noCache.Invalidate(ctx, "k"),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	//lint:ignore SA1012 a nil context is what is tested
	if err := p.Set(nil, "k", "v"); !errors.Is(err, ErrNilContext) {
		t.Errorf("Set(nil ctx) = %v", err)
	}
	if err := noCache.Set(ctx, "k", "v"); !errors.Is(err, ErrWrongCall) {
		t.Errorf("Set without a cache = %v, want ErrWrongCall", err)
	}
	if _, _, err := p.Peek(ctx, ""); !errors.Is(err, ErrEmptyKey) {
		t.Errorf("Peek(\"\") = %v", err)
	}
	if _, err := p.Refresh(ctx, "k", nil); !errors.Is(err, ErrNilLoader) {
		t.Errorf("Refresh(nil load) = %v", err)
	}
	_ = p.Close()
	if err := p.Set(ctx, "k", "v"); !errors.Is(err, ErrClosed) {
		t.Errorf("Set after Close = %v", err)
	}
	if err := p.Invalidate(ctx, "k"); !errors.Is(err, ErrClosed) {
		t.Errorf("Invalidate after Close = %v", err)
	}
	if _, err := p.Refresh(ctx, "k", load); !errors.Is(err, ErrClosed) {
		t.Errorf("Refresh after Close = %v", err)
	}
}

// TestWrites_redisWithoutLock: the subscription that carries writes is
// held with Redis alone; Set and Invalidate reach the other pipeline's L1.
func TestWrites_redisWithoutLock(t *testing.T) {
	srv := redistest.Start(t)
	var ps []*Pipeline[string]
	for range 2 {
		p := build(t, New[string]("w-nolock").Cache(time.Minute).SingleFlight().Redis(srv.Client()))
		waitFor(t, func() bool { return p.Health().Subscribed })
		ps = append(ps, p)
	}
	s := newSource("v1")
	for _, p := range ps {
		mustGet(t, p, "k", s.load)
	}
	if err := ps[0].Set(ctxT(t), "k", "v2"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, ok := l1Value(ps[1], "k"); return !ok })
	if r := mustGet(t, ps[1], "k", s.load); r.Value != "v2" || r.Source != SourceL2 {
		t.Fatalf("after Set: %q (%v), want v2 from l2", r.Value, r.Source)
	}
	if err := ps[0].Invalidate(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, ok := l1Value(ps[1], "k"); return !ok })
	s.row.Store("v3")
	if r := mustGet(t, ps[1], "k", s.load); r.Value != "v3" || r.Source != SourceLoader {
		t.Fatalf("after Invalidate: %q (%v), want v3 from the loader", r.Value, r.Source)
	}
}
