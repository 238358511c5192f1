package resilience

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/fallback"
	"github.com/herdguard/herdguard/internal/coord"
	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/telemetry"
)

// counter is a loader that counts its calls and can be told what to do.
type counter struct {
	calls atomic.Int64
	delay time.Duration
	gate  chan struct{} // if not nil, the loader waits for it to close
	fn    func(n int64) (string, error)
}

func (c *counter) load(ctx context.Context, key string) (string, error) {
	n := c.calls.Add(1)
	if c.gate != nil {
		select {
		case <-c.gate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if c.delay > 0 {
		select {
		case <-time.After(c.delay):
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if c.fn != nil {
		return c.fn(n)
	}
	return "v:" + key, nil
}

func build[V any](t *testing.T, b *Builder[V]) *Pipeline[V] {
	t.Helper()
	p, err := b.Build()
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestGet_singleFlight_oneLoadForManyCallers(t *testing.T) {
	rec := newTelRec(t)
	p := build(t, New[string]("sf").Cache(time.Minute).SingleFlight().TracerProvider(rec.tp))
	c := &counter{gate: make(chan struct{})}
	const n = 200
	var wg sync.WaitGroup
	results := make([]Result[string], n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = p.GetResult(context.Background(), "k", c.load)
		}()
	}
	// Let the callers pile up behind the one load before it finishes:
	// each starts its single-flight span as it joins.
	waitFor(t, func() bool { return c.calls.Load() == 1 && rec.startedNamed(telemetry.SpanSingleFlight) == n })
	close(c.gate)
	wg.Wait()
	if got := c.calls.Load(); got != 1 {
		t.Fatalf("loader calls = %d, want 1", got)
	}
	bySource := map[Source]int{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if results[i].Value != "v:k" {
			t.Fatalf("caller %d: value %q", i, results[i].Value)
		}
		bySource[results[i].Source]++
	}
	if bySource[SourceLoader] != 1 {
		t.Errorf("sources = %v, want exactly one loader", bySource)
	}
	if bySource[SourceLoader]+bySource[SourceCoalesced]+bySource[SourceL1] != n {
		t.Errorf("sources = %v, want only loader, coalesced, l1", bySource)
	}
	r, err := p.GetResult(context.Background(), "k", c.load)
	if err != nil || r.Source != SourceL1 || r.Value != "v:k" {
		t.Fatalf("after load: %+v, %v; want l1 hit", r, err)
	}
}

func TestGet_joinerLeaves_loadGoesOn(t *testing.T) {
	rec := newTelRec(t)
	p := build(t, New[string]("leave").Cache(time.Minute).SingleFlight().TracerProvider(rec.tp))
	c := &counter{gate: make(chan struct{})}
	leaderDone := make(chan error, 1)
	go func() {
		_, err := p.Get(context.Background(), "k", c.load)
		leaderDone <- err
	}()
	waitFor(t, func() bool { return c.calls.Load() == 1 })

	ctx, cancel := context.WithCancel(context.Background())
	joined := make(chan error, 1)
	go func() {
		_, err := p.Get(ctx, "k", c.load)
		joined <- err
	}()
	waitFor(t, func() bool { return rec.startedNamed(telemetry.SpanSingleFlight) == 2 })
	cancel()
	select {
	case err := <-joined:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("joiner err = %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("joiner did not return after its ctx ended")
	}
	close(c.gate)
	if err := <-leaderDone; err != nil {
		t.Fatalf("leader: %v", err)
	}
	if c.calls.Load() != 1 {
		t.Fatalf("loader calls = %d, want 1", c.calls.Load())
	}
}

func TestGet_leaderLeaves_sharedLoadFinishesDetached(t *testing.T) {
	rec := newTelRec(t)
	p := build(t, New[string]("detach").Cache(time.Minute).SingleFlight().TracerProvider(rec.tp))
	c := &counter{gate: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	leader := make(chan error, 1)
	go func() {
		_, err := p.Get(ctx, "k", c.load)
		leader <- err
	}()
	waitFor(t, func() bool { return c.calls.Load() == 1 })
	joiner := make(chan Result[string], 1)
	go func() {
		r, _ := p.GetResult(context.Background(), "k", c.load)
		joiner <- r
	}()
	waitFor(t, func() bool { return rec.startedNamed(telemetry.SpanSingleFlight) == 2 })
	cancel() // the leader leaves; its load must not be cancelled
	if err := <-leader; !errors.Is(err, context.Canceled) {
		t.Fatalf("leader err = %v, want context.Canceled", err)
	}
	close(c.gate)
	r := <-joiner
	if r.Value != "v:k" || r.Source != SourceCoalesced {
		t.Fatalf("joiner got %+v, want the shared value, coalesced", r)
	}
	if c.calls.Load() != 1 {
		t.Fatalf("loader calls = %d, want 1", c.calls.Load())
	}
}

func TestGet_loaderPanic_isErrorForEveryWaiter(t *testing.T) {
	rec := newTelRec(t)
	p := build(t, New[string]("panic").Cache(time.Minute).SingleFlight().TracerProvider(rec.tp))
	gate := make(chan struct{})
	var calls atomic.Int64
	load := func(ctx context.Context, key string) (string, error) {
		calls.Add(1)
		<-gate
		panic("boom")
	}
	const n = 20
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := p.Get(context.Background(), "k", load)
			errs <- err
		}()
	}
	waitFor(t, func() bool { return calls.Load() == 1 && rec.startedNamed(telemetry.SpanSingleFlight) == n })
	close(gate)
	for range n {
		err := <-errs
		var pe *PanicError
		if !errors.As(err, &pe) || pe.Value != "boom" || len(pe.Stack) == 0 {
			t.Fatalf("err = %v, want *PanicError{boom} with a stack", err)
		}
	}
}

func TestGet_values_zeroNotFoundMiss(t *testing.T) {
	p := build(t, New[int]("values").Cache(time.Minute).NegativeTTL(time.Second))
	var calls atomic.Int64
	load := func(_ context.Context, key string) (int, error) {
		calls.Add(1)
		if key == "missing" {
			return 0, ErrNotFound
		}
		return 0, nil // a real zero value
	}
	for round := range 2 {
		r, err := p.GetResult(context.Background(), "zero", load)
		if err != nil || r.NotFound || r.Value != 0 {
			t.Fatalf("zero round %d: %+v %v", round, r, err)
		}
		wantSrc := []Source{SourceLoader, SourceL1}[round]
		if r.Source != wantSrc {
			t.Fatalf("zero round %d: source %v, want %v", round, r.Source, wantSrc)
		}
		r, err = p.GetResult(context.Background(), "missing", load)
		if !errors.Is(err, ErrNotFound) || !r.NotFound || r.Source != wantSrc {
			t.Fatalf("missing round %d: %+v %v, want not found from %v", round, r, err, wantSrc)
		}
	}
	// Get's own L1 path keeps the three outcomes apart too.
	if v, err := p.Get(context.Background(), "zero", load); err != nil || v != 0 {
		t.Fatalf("Get zero: %d %v", v, err)
	}
	if _, err := p.Get(context.Background(), "missing", load); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get missing: %v, want ErrNotFound", err)
	}
	if calls.Load() != 2 {
		t.Fatalf("loader calls = %d, want 2 (both outcomes cached)", calls.Load())
	}
}

func TestGet_notFound_notCachedWithoutNegativeTTL(t *testing.T) {
	p := build(t, New[int]("noneg").Cache(time.Minute))
	var calls atomic.Int64
	load := func(context.Context, string) (int, error) { calls.Add(1); return 0, ErrNotFound }
	for range 3 {
		r, err := p.GetResult(context.Background(), "k", load)
		if !errors.Is(err, ErrNotFound) || !r.NotFound {
			t.Fatalf("got %+v %v", r, err)
		}
	}
	if calls.Load() != 3 {
		t.Fatalf("loader calls = %d, want 3", calls.Load())
	}
}

func TestGet_fallback_staleThenDefaultThenError(t *testing.T) {
	fail := errors.New("db down")
	cases := []struct {
		name    string
		b       *Builder[string]
		prime   bool
		wantSrc Source
		wantVal string
		wantErr error
	}{
		{"stale within grace", New[string]("fb1").Cache(10 * time.Millisecond).Jitter(0).Stale(time.Hour).DefaultValue("dflt"), true, SourceStale, "v:k", nil},
		{"default without stale", New[string]("fb2").Cache(10 * time.Millisecond).Jitter(0).DefaultValue("dflt"), true, SourceDefault, "dflt", nil},
		{"error without either", New[string]("fb3").Cache(10 * time.Millisecond).Jitter(0), true, SourceNone, "", fail},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := build(t, tc.b)
			c := &counter{}
			if tc.prime {
				if _, err := p.Get(context.Background(), "k", c.load); err != nil {
					t.Fatal(err)
				}
			}
			c.fn = func(int64) (string, error) { return "", fail }
			// L1 answers until the TTL has passed; the first call after it
			// is the one under test.
			var r Result[string]
			var err error
			waitFor(t, func() bool {
				r, err = p.GetResult(context.Background(), "k", c.load)
				return r.Source != SourceL1
			})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if r.Source != tc.wantSrc || r.Value != tc.wantVal {
				t.Fatalf("got %+v, want %v %q", r, tc.wantSrc, tc.wantVal)
			}
			if tc.wantErr == nil && !errors.Is(r.Cause, fail) {
				t.Fatalf("Cause = %v, want the loader's error", r.Cause)
			}
		})
	}
}

func TestGet_breaker_opensAndFallsBack_callerCancelDoesNotCount(t *testing.T) {
	var changes []string
	var mu sync.Mutex
	p := build(t, New[string]("br").Cache(time.Minute).SingleFlight().
		Breaker(breaker.Settings{Failures: 3, OpenTimeout: 50 * time.Millisecond}).
		DefaultValue("dflt").
		OnBreakerChange(func(name string, from, to breaker.State) {
			mu.Lock()
			changes = append(changes, from.String()+">"+to.String())
			mu.Unlock()
		}))
	// Caller cancellations: many, none counts.
	slow := &counter{delay: time.Second}
	for i := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		_, err := p.Get(ctx, "slow"+string(rune('a'+i)), slow.load)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want the caller's deadline", err)
		}
	}
	fail := &counter{fn: func(int64) (string, error) { return "", errors.New("boom") }}
	for i := range 3 {
		r, err := p.GetResult(context.Background(), "f"+string(rune('a'+i)), fail.load)
		if err != nil || r.Source != SourceDefault {
			t.Fatalf("failure %d: %+v %v, want default", i, r, err)
		}
	}
	before := fail.calls.Load()
	r, err := p.GetResult(context.Background(), "fx", fail.load)
	if err != nil || r.Source != SourceDefault || !coord.IsRefusal(r.Cause) {
		t.Fatalf("open breaker: %+v %v, want default for breaker_open", r, err)
	}
	if fail.calls.Load() != before {
		t.Fatal("loader called while the breaker was open")
	}
	// Once OpenTimeout has passed, the breaker is half-open: one probe
	// goes through. Until then, calls get the default.
	ok := &counter{}
	waitFor(t, func() bool {
		r, err := p.GetResult(context.Background(), "probe", ok.load)
		if err != nil || (r.Source != SourceLoader && r.Source != SourceDefault) {
			t.Fatalf("probe: %+v %v", r, err)
		}
		return r.Source == SourceLoader
	})
	if n := ok.calls.Load(); n != 1 {
		t.Fatalf("probe loader calls = %d, want 1", n)
	}
	mu.Lock()
	got := strings.Join(changes, ",")
	mu.Unlock()
	if got != "closed>open,open>half-open,half-open>closed" {
		t.Fatalf("transitions = %q", got)
	}
	// The abandoned slow loads go on detached; Close, at cleanup, waits
	// for them before goleak looks.
	waitFor(t, func() bool { return slow.calls.Load() == 5 })
}

func TestGet_timeout_isFailureAndFallsBack(t *testing.T) {
	p := build(t, New[string]("to").Cache(time.Minute).Timeout(20*time.Millisecond).DefaultValue("dflt"))
	c := &counter{delay: time.Second}
	r, err := p.GetResult(context.Background(), "k", c.load)
	if err != nil || r.Source != SourceDefault || !errors.Is(r.Cause, ErrTimeout) {
		t.Fatalf("got %+v %v, want default after ErrTimeout", r, err)
	}
}

func TestGet_badCalls(t *testing.T) {
	p := build(t, New[string]("bad").Cache(time.Minute))
	c := &counter{}
	var nilCtx context.Context
	cases := []struct {
		name string
		ctx  context.Context
		key  string
		load LoadFunc[string]
		want error
	}{
		{"nil ctx", nilCtx, "k", c.load, ErrNilContext},
		{"empty key", context.Background(), "", c.load, ErrEmptyKey},
		{"nil loader", context.Background(), "k", nil, ErrNilLoader},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := p.Get(tc.ctx, tc.key, tc.load); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := p.Do(context.Background(), func(context.Context) (string, error) { return "", nil }); !errors.Is(err, ErrWrongCall) {
		t.Fatalf("Do on keyed pipeline: %v, want ErrWrongCall", err)
	}
	_ = p.Close()
	if _, err := p.Get(context.Background(), "k", c.load); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
}

func TestBuild_rejectsBadConfig(t *testing.T) {
	cases := []struct {
		name  string
		b     *Builder[int]
		field string
	}{
		{"empty name", New[int]("").Cache(time.Minute), "New"},
		{"zero ttl", New[int]("x").Cache(0), "Cache"},
		{"negative timeout", New[int]("x").Timeout(-time.Second), "Timeout"},
		{"keyless with cache", New[int]("x").Keyless().Cache(time.Minute), "Cache"},
		{"keyless with lock", New[int]("x").Keyless().Lock(LockSettings{}), "Lock"},
		{"lock without cache", New[int]("x").Lock(LockSettings{}), "Lock"},
		{"stale without cache", New[int]("x").Stale(time.Minute), "Stale"},
		{"swr without stale", New[int]("x").Cache(time.Minute).StaleWhileRevalidate(), "StaleWhileRevalidate"},
		{"l1 ttl longer", New[int]("x").Cache(time.Minute).L1TTL(time.Hour), "L1TTL"},
		{"jitter out of range", New[int]("x").Cache(time.Minute).Jitter(1.5), "Jitter"},
		{"call timeout on keyed", New[int]("x").Cache(time.Minute).CallTimeout(time.Second), "CallTimeout"},
		{"flight shorter than timeout", New[int]("x").Cache(time.Minute).Timeout(time.Minute).FlightTimeout(time.Second), "FlightTimeout"},
		{"bad retry", New[int]("x").Keyless().Retry(RetrySettings{MaxAttempts: -1}), "Retry"},
		{"nil redis", New[int]("x").Cache(time.Minute).Redis(nil), "Redis"},
		{"negative breaker timeout", New[int]("x").Breaker(breaker.Settings{OpenTimeout: -1}), "Breaker"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tc.b.Build()
			if err == nil {
				_ = p.Close()
				t.Fatal("Build accepted a bad configuration")
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field {
				t.Fatalf("err = %v, want a ConfigError on %s", err, tc.field)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("message %q does not name %s", err, tc.field)
			}
		})
	}
}

// TestBuild_Lock_negativeDurationNamesField: a negative lock duration is
// reported by its own name, one error per field.
func TestBuild_Lock_negativeDurationNamesField(t *testing.T) {
	cases := []struct {
		field string
		s     LockSettings
	}{
		{"Lease", LockSettings{Lease: -time.Second}},
		{"MaxWait", LockSettings{MaxWait: -time.Second}},
		{"Poll", LockSettings{Poll: -time.Second}},
		{"Heartbeat", LockSettings{Heartbeat: -time.Second}},
	}
	for _, tc := range cases {
		t.Run(tc.field, func(t *testing.T) {
			p, err := New[int]("x").Cache(time.Minute).Lock(tc.s).Build()
			if err == nil {
				_ = p.Close()
				t.Fatal("Build accepted a negative duration")
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != "Lock" {
				t.Fatalf("err = %v, want a ConfigError on Lock", err)
			}
			if want := tc.field + " must not be negative"; !strings.HasPrefix(ce.Problem, want) {
				t.Fatalf("problem %q, want it to start with %q", ce.Problem, want)
			}
		})
	}
	_, err := New[int]("x").Cache(time.Minute).Lock(LockSettings{Lease: -1, Poll: -1}).Build()
	if err == nil || !strings.Contains(err.Error(), "Lease must not") || !strings.Contains(err.Error(), "Poll must not") {
		t.Fatalf("two negative fields: err = %v, want both named", err)
	}
}

func TestDo_keyless_breakerTimeoutDefault(t *testing.T) {
	p := build(t, New[string]("post").Keyless().CallTimeout(30*time.Millisecond).DefaultValue("queued"))
	r, err := p.DoResult(context.Background(), func(ctx context.Context) (string, error) { return "ok", nil })
	if err != nil || r.Value != "ok" || r.Source != SourceLoader {
		t.Fatalf("got %+v %v", r, err)
	}
	r, err = p.DoResult(context.Background(), func(ctx context.Context) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	})
	if err != nil || r.Source != SourceDefault || !errors.Is(r.Cause, ErrTimeout) {
		t.Fatalf("timed out call: %+v %v, want default for ErrTimeout", r, err)
	}
	if _, err := p.Get(context.Background(), "k", func(context.Context, string) (string, error) { return "", nil }); !errors.Is(err, ErrWrongCall) {
		t.Fatalf("Get on keyless: %v, want ErrWrongCall", err)
	}
}

// TestGet_redisLock_twoPipelinesOneLoad: two pipelines of one name on one
// Redis stand for two processes, each with its own single-flight; only the
// distributed lock keeps the second from loading too. Callers on both pile
// up, the second pipeline's load reaches the lock while the first holds it,
// and one loader call serves everyone.
func TestGet_redisLock_twoPipelinesOneLoad(t *testing.T) {
	srv := redistest.Start(t)
	rec := newTelRec(t)
	holder := build(t, New[string]("rlock").Cache(time.Minute).Redis(srv.Client()).Lock(LockSettings{Poll: 5 * time.Millisecond}))
	waiter := build(t, New[string]("rlock").Cache(time.Minute).Redis(srv.Client()).Lock(LockSettings{Poll: 5 * time.Millisecond}).
		TracerProvider(rec.tp))
	c := &counter{gate: make(chan struct{})}
	ctx := context.Background()
	var wg sync.WaitGroup
	get := func(p *Pipeline[string]) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if v, err := p.Get(ctx, "k", c.load); err != nil || v != "v:k" {
				t.Errorf("got %q %v", v, err)
			}
		}()
	}
	get(holder)
	waitFor(t, func() bool { return c.calls.Load() == 1 })
	for range 25 {
		get(holder)
		get(waiter)
	}
	// The waiter's load has met the held lock once its lock span starts;
	// were the lock not held against it, it would be loading by then.
	waitFor(t, func() bool { return rec.startedNamed(telemetry.SpanLock) > 0 || c.calls.Load() > 1 })
	close(c.gate)
	wg.Wait()
	if got := c.calls.Load(); got != 1 {
		t.Fatalf("loader calls = %d, want 1 across both pipelines", got)
	}
	if h, w := holder.Stats().DuplicateLoads, waiter.Stats().DuplicateLoads; h != 0 || w != 0 {
		t.Fatalf("DuplicateLoads = %d and %d, want 0 in a healthy stampede", h, w)
	}
}

func TestGet_staleWhileRevalidate_servesStaleRefreshesOnce(t *testing.T) {
	p := build(t, New[string]("swr").Cache(20*time.Millisecond).Jitter(0).Stale(time.Hour).StaleWhileRevalidate())
	c := &counter{}
	if _, err := p.Get(context.Background(), "k", c.load); err != nil {
		t.Fatal(err)
	}
	// The refresh waits at the gate until the calls below are served.
	c.gate = make(chan struct{})
	c.fn = func(n int64) (string, error) { return "new", nil }
	// L1 answers until the TTL has passed; the first call after it gets
	// the stale copy and starts the refresh.
	waitFor(t, func() bool {
		r, err := p.GetResult(context.Background(), "k", c.load)
		if err != nil || r.Value != "v:k" {
			t.Fatalf("got %+v %v, want the first value", r, err)
		}
		return r.Source == SourceStale
	})
	for range 10 {
		r, err := p.GetResult(context.Background(), "k", c.load)
		if err != nil || r.Source != SourceStale || r.Value != "v:k" {
			t.Fatalf("got %+v %v, want the stale copy at once", r, err)
		}
	}
	close(c.gate)
	// The new value lands. Its TTL is short enough to pass while this
	// waits on a busy machine, and a refresh it calls for then must not
	// count: it goes to another loader.
	later := &counter{fn: func(int64) (string, error) { return "new", nil }}
	waitFor(t, func() bool {
		r, _ := p.GetResult(context.Background(), "k", later.load)
		return (r.Source == SourceL1 || r.Source == SourceStale) && r.Value == "new"
	})
	if got := c.calls.Load(); got != 2 {
		t.Fatalf("loader calls = %d, want 2 (one refresh)", got)
	}
}

// TestGet_untracedJoiners covers the joiners of a load under way when
// tracing is off, the path a burst's callers take: the
// shared value, coalesced, for Get and GetResult; a joiner whose context
// ends leaves at once; a failed load gives every joiner the fallback; and
// Stats counts each call once.
func TestGet_untracedJoiners(t *testing.T) {
	const joiners = 8
	fail := errors.New("db down")
	for _, tc := range []struct {
		name    string
		loadErr error
		want    Result[string]
		wantErr error
	}{
		{name: "value", want: Result[string]{Value: "v:k", Source: SourceCoalesced}},
		{name: "failed load", loadErr: fail, want: Result[string]{Value: "safe", Source: SourceDefault}},
		{name: "not found", loadErr: ErrNotFound, want: Result[string]{Source: SourceCoalesced, NotFound: true}, wantErr: ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := build(t, New[string]("untraced").Cache(time.Minute).SingleFlight().DefaultValue("safe"))
			c := &counter{gate: make(chan struct{}), fn: func(int64) (string, error) {
				if tc.loadErr != nil {
					return "", tc.loadErr
				}
				return "v:k", nil
			}}
			go func() { _, _ = p.Get(context.Background(), "k", c.load) }()
			waitFor(t, func() bool { return c.calls.Load() == 1 })

			type got struct {
				r      Result[string]
				err    error
				result bool // from GetResult, with Cause
			}
			results := make(chan got, joiners)
			for i := range joiners {
				go func() {
					if i%2 == 0 {
						r, err := p.GetResult(context.Background(), "k", c.load)
						results <- got{r, err, true}
						return
					}
					v, err := p.Get(context.Background(), "k", c.load)
					results <- got{Result[string]{Value: v, Source: tc.want.Source, NotFound: errors.Is(err, ErrNotFound)}, err, false}
				}()
			}
			leaving, leave := context.WithCancel(context.Background())
			left := make(chan error, 1)
			go func() {
				_, err := p.Get(leaving, "k", c.load)
				left <- err
			}()
			waitFor(t, func() bool { return p.Stats().Misses == joiners+2 })
			leave()
			if err := <-left; !errors.Is(err, context.Canceled) {
				t.Fatalf("the joiner that left got %v, want context.Canceled", err)
			}
			close(c.gate)
			for range joiners {
				g := <-results
				if !errors.Is(g.err, tc.wantErr) || (tc.wantErr == nil && g.err != nil) {
					t.Fatalf("joiner err = %v, want %v", g.err, tc.wantErr)
				}
				if g.r.Value != tc.want.Value || g.r.Source != tc.want.Source || g.r.NotFound != tc.want.NotFound {
					t.Fatalf("joiner got %+v, want %+v", g.r, tc.want)
				}
				if g.result && tc.loadErr != nil && !tc.want.NotFound && !errors.Is(g.r.Cause, tc.loadErr) {
					t.Fatalf("joiner's Cause = %v, want %v", g.r.Cause, tc.loadErr)
				}
			}
			if n := c.calls.Load(); n != 1 {
				t.Fatalf("loader calls = %d, want 1", n)
			}
			// The leader's Get may still be counting.
			waitFor(t, func() bool {
				s := p.Stats()
				return s.Loaded+s.Defaults+s.Coalesced+s.Errors+s.NotFound >= joiners+2
			})
			s := p.Stats()
			switch {
			case tc.want.Source == SourceCoalesced && !tc.want.NotFound && s.Coalesced != joiners:
				t.Fatalf("Stats.Coalesced = %d, want %d", s.Coalesced, joiners)
			case tc.want.Source == SourceDefault && s.Defaults < joiners:
				t.Fatalf("Stats.Defaults = %d, want at least %d", s.Defaults, joiners)
			case tc.want.NotFound && s.NotFound != joiners+1:
				t.Fatalf("Stats.NotFound = %d, want %d", s.NotFound, joiners+1)
			}
		})
	}
}

// TestDefault_errorAndValue: DefaultValue serves its value for every key;
// an error from Default's fn comes back as a *fallback.DefaultError that
// holds both errors.
func TestDefault_errorAndValue(t *testing.T) {
	ctx := context.Background()
	errLoad, errDefault := errors.New("load failed"), errors.New("default failed")
	failing := func(context.Context, string) (int, error) { return 0, errLoad }
	p := build(t, New[int]("default-value").Cache(time.Minute).DefaultValue(7))
	for _, key := range []string{"a", "b"} {
		r, err := p.GetResult(ctx, key, failing)
		if err != nil || r.Value != 7 || r.Source != SourceDefault || !errors.Is(r.Cause, errLoad) {
			t.Fatalf("key %s: %+v %v; want 7 from the default, caused by the load", key, r, err)
		}
	}
	q := build(t, New[int]("default-fn").Cache(time.Minute).
		Default(func(context.Context, string, error) (int, error) { return 0, errDefault }))
	_, err := q.Get(ctx, "a", failing)
	var de *fallback.DefaultError
	if !errors.As(err, &de) || !errors.Is(err, errDefault) || !errors.Is(err, errLoad) {
		t.Fatalf("err = %v; want a *fallback.DefaultError holding both errors", err)
	}
}
