package resilience

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/rkey"
)

// The tests in this file inject faults into real redis-server processes
// (SIGKILL, SIGSTOP/SIGCONT, restart on the same port) and check the "Fail
// open" contract of DESIGN.md: a call whose loader works never fails because
// Redis does, no caller waits much longer than the Redis operations' own
// timeouts, and the Redis breaker's half-open probe restores L2 and locking.
//
// Each test uses its own clients: the Redis breaker is shared per client.
// Figures for the table in docs/failure-modes.md are logged with t.Logf; run
// with -v to see them.

const (
	// faultOpTimeout is the per-operation Redis timeout of these tests.
	faultOpTimeout = 100 * time.Millisecond
	// redisOpsOnPath is the most Redis operations one call makes in turn:
	// L2 get, lock acquire, re-check get, L2 set, notify, release.
	redisOpsOnPath = 6
	// acquireCleanup is how long lock.Redis.TryAcquire may spend past its
	// deadline deleting a lock whose outcome is unknown (its cleanupTimeout).
	acquireCleanup = time.Second
	// schedMargin absorbs scheduling on a loaded two-core machine under
	// -race. It is slack, not a performance claim.
	schedMargin = 2 * time.Second
)

// latencies collects call durations from many goroutines.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// stats returns the count, the 99th percentile and the maximum.
func (l *latencies) stats() (n int, p99, maxD time.Duration) {
	l.mu.Lock()
	d := slices.Clone(l.d)
	l.mu.Unlock()
	if len(d) == 0 {
		return 0, 0, 0
	}
	slices.Sort(d)
	i := (len(d)*99+99)/100 - 1 // nearest rank
	return len(d), d[i], d[len(d)-1]
}

// transitions records breaker state changes with their times.
type transitions struct {
	mu   sync.Mutex
	list []transitionAt
}

type transitionAt struct {
	name     string
	from, to breaker.State
	at       time.Time
}

func (tr *transitions) observe(name string, from, to breaker.State) {
	tr.mu.Lock()
	tr.list = append(tr.list, transitionAt{name, from, to, time.Now()})
	tr.mu.Unlock()
}

// first returns the first transition of breaker name into to at or after
// since.
func (tr *transitions) first(name string, to breaker.State, since time.Time) (time.Time, bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, x := range tr.list {
		if x.name == name && x.to == to && !x.at.Before(since) {
			return x.at, true
		}
	}
	return time.Time{}, false
}

func (tr *transitions) String() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	s := ""
	for i, x := range tr.list {
		if i == 4 && len(tr.list) > 6 {
			s += fmt.Sprintf("… (%d in all) ", len(tr.list))
			continue
		}
		if i > 4 && i < len(tr.list)-1 {
			continue
		}
		s += fmt.Sprintf("%s:%s>%s ", x.name, x.from, x.to)
	}
	return s
}

// waitGroupWithin waits for wg, failing the test if it takes longer than d.
func waitGroupWithin(t *testing.T, wg *sync.WaitGroup, d time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("goroutines still running after %v", d)
	}
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// faultPod builds a pipeline on its own client of srv (one pod).
func faultPod(t *testing.T, srv *redistest.Server, name string, bs breaker.Settings, tr *transitions, more func(*Builder[string]) *Builder[string]) *Pipeline[string] {
	t.Helper()
	b := New[string](name).Cache(time.Minute).
		Redis(srv.Client()).
		RedisOptions(RedisOptions{OpTimeout: faultOpTimeout, Breaker: bs})
	if tr != nil {
		b = b.OnBreakerChange(tr.observe)
	}
	if more != nil {
		b = more(b)
	}
	return build(t, b)
}

func TestFailOpen_redisKilled_midStampede(t *testing.T) {
	srv := redistest.Start(t)
	const pods, callers = 8, 512
	const loadTime = 300 * time.Millisecond
	pipes := make([]*Pipeline[string], pods)
	for i := range pods {
		pipes[i] = faultPod(t, srv, "stampede", breaker.Settings{Failures: 3, OpenTimeout: time.Minute}, nil,
			func(b *Builder[string]) *Builder[string] {
				return b.Lock(LockSettings{Lease: 10 * time.Second, Poll: 50 * time.Millisecond})
			})
	}
	var loads [pods]atomic.Int64
	var locked atomic.Int64 // loads under a lease (with a fence)
	loading := make(chan struct{})
	var once sync.Once
	loader := func(pod int) LoadFunc[string] {
		return func(ctx context.Context, key string) (string, error) {
			loads[pod].Add(1)
			if _, ok := Fence(ctx, key); ok {
				locked.Add(1)
			}
			once.Do(func() { close(loading) })
			if err := sleepCtx(ctx, loadTime); err != nil {
				return "", err
			}
			return "value of " + key, nil
		}
	}

	var (
		wg         sync.WaitGroup
		errCount   atomic.Int64
		wrong      atomic.Int64
		failedOpen atomic.Int64
		lat        latencies
		firstErr   atomic.Value
	)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := make(chan struct{})
	for c := range callers {
		pod := c % pods
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			t0 := time.Now()
			r, err := pipes[pod].GetResult(ctx, "hot", loader(pod))
			lat.add(time.Since(t0))
			switch {
			case err != nil:
				errCount.Add(1)
				firstErr.CompareAndSwap(nil, err)
			case r.Value != "value of hot":
				wrong.Add(1)
			}
			if r.FailedOpen {
				failedOpen.Add(1)
			}
		}()
	}
	close(start)
	select {
	case <-loading:
	case <-time.After(10 * time.Second):
		t.Fatal("no loader call within 10s")
	}
	// The first loader is running (it holds the lock); the other pods are
	// waiting on it or about to.
	if err := srv.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	waitGroupWithin(t, &wg, 30*time.Second)

	if n := errCount.Load(); n != 0 {
		t.Errorf("%d of %d callers got an error while the loader worked; first: %v", n, callers, firstErr.Load())
	}
	if n := wrong.Load(); n != 0 {
		t.Errorf("%d callers got a wrong value", n)
	}
	total := int64(0)
	for i := range pods {
		n := loads[i].Load()
		total += n
		if n > 1 {
			t.Errorf("pod %d called the loader %d times, want at most once per process", i, n)
		}
	}
	if total == 0 {
		t.Error("no loader call at all")
	}
	// The first load held the lock (unless, on a loaded machine, its look
	// too ran past the operation timeout); every other one ran failed
	// open, a duplicate.
	if n := locked.Load(); n > 1 {
		t.Errorf("%d loads held the lock at once", n)
	}
	dups := uint64(0)
	for _, p := range pipes {
		dups += p.Stats().DuplicateLoads
	}
	if want := uint64(total - locked.Load()); dups != want {
		t.Errorf("DuplicateLoads = %d across the pods, want the %d loads that held no lock", dups, want)
	}
	if failedOpen.Load() == 0 {
		t.Error("no call reported FailedOpen though Redis died during the stampede")
	}
	n, p99, maxD := lat.stats()
	t.Logf("FIGURES redis_killed: callers=%d errors=%d failed_open=%d loader_calls=%d (pods=%d) p99=%v max=%v",
		n, errCount.Load(), failedOpen.Load(), total, pods, p99.Round(time.Millisecond), maxD.Round(time.Millisecond))
}

func TestFailOpen_redisPaused_boundedWaitAndBreakerOpens(t *testing.T) {
	cases := []struct {
		name  string
		pause time.Duration
	}{
		{"3s", 3 * time.Second},
		{"10s", 10 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && tc.pause > 5*time.Second {
				t.Skip("long pause skipped in -short mode")
			}
			testRedisPaused(t, tc.pause)
		})
	}
}

func testRedisPaused(t *testing.T, pause time.Duration) {
	srv := redistest.Start(t)
	const loadTime = 20 * time.Millisecond
	const workers = 16
	tr := &transitions{}
	p := faultPod(t, srv, "paused", breaker.Settings{Failures: 3, OpenTimeout: 500 * time.Millisecond}, tr,
		func(b *Builder[string]) *Builder[string] {
			return b.Lock(LockSettings{Lease: 5 * time.Second, Poll: 50 * time.Millisecond})
		})
	load := func(ctx context.Context, key string) (string, error) {
		if err := sleepCtx(ctx, loadTime); err != nil {
			return "", err
		}
		return "v:" + key, nil
	}
	if r, err := p.GetResult(context.Background(), "warm", load); err != nil || r.FailedOpen {
		t.Fatalf("healthy Redis: %+v %v", r, err)
	}

	if err := srv.Pause(); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := srv.Resume(); err != nil {
				t.Errorf("Resume: %v", err)
			}
		}
	}
	defer resume()
	paused := time.Now()
	until := paused.Add(pause)

	var (
		wg       sync.WaitGroup
		lat      latencies
		errCount atomic.Int64
		firstErr atomic.Value
		fo       atomic.Int64
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(until); i++ {
				// A new key each time: every call misses L1 and goes to Redis.
				key := fmt.Sprintf("k%d-%d", w, i)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				t0 := time.Now()
				r, err := p.GetResult(ctx, key, load)
				lat.add(time.Since(t0))
				cancel()
				if err != nil {
					errCount.Add(1)
					firstErr.CompareAndSwap(nil, err)
				} else if r.Value != "v:"+key {
					errCount.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Errorf("key %s: value %q", key, r.Value))
				}
				if r.FailedOpen {
					fo.Add(1)
				}
			}
		}()
	}
	waitGroupWithin(t, &wg, pause+time.Minute)
	resume()

	bound := redisOpsOnPath*faultOpTimeout + acquireCleanup + loadTime + schedMargin
	n, p99, maxD := lat.stats()
	if n == 0 {
		t.Fatal("no call completed during the pause")
	}
	if e := errCount.Load(); e != 0 {
		t.Errorf("%d of %d calls failed while Redis was paused; first: %v", e, n, firstErr.Load())
	}
	if maxD > bound {
		t.Errorf("a caller waited %v, want at most %v (%d ops × %v + lock cleanup %v + loader %v + margin %v)",
			maxD, bound, redisOpsOnPath, faultOpTimeout, acquireCleanup, loadTime, schedMargin)
	}
	opened, ok := tr.first("redis", breaker.Open, paused)
	if !ok {
		t.Errorf("the Redis breaker never opened during the pause; transitions: %s", tr)
	}
	t.Logf("FIGURES redis_paused(%v): calls=%d errors=%d failed_open=%d p99=%v max=%v bound=%v breaker_open_after=%v transitions=%s",
		pause, n, errCount.Load(), fo.Load(), p99.Round(time.Millisecond), maxD.Round(time.Millisecond), bound,
		opened.Sub(paused).Round(time.Millisecond), tr)
}

func TestFailOpen_redisRestarted_l2AndLockResume(t *testing.T) {
	srv := redistest.Start(t)
	const openTimeout = time.Second
	tr := &transitions{}
	// L1TTL of 1ms: a second call for a key goes to Redis, so it shows
	// whether L2 serves it.
	p := faultPod(t, srv, "restart", breaker.Settings{Failures: 2, OpenTimeout: openTimeout}, tr,
		func(b *Builder[string]) *Builder[string] {
			return b.L1TTL(time.Millisecond).Lock(LockSettings{Lease: 5 * time.Second, Poll: 50 * time.Millisecond})
		})
	direct := srv.Client() // reads Redis directly, outside the pipeline's breaker
	var loads atomic.Int64
	load := func(_ context.Context, key string) (string, error) {
		loads.Add(1)
		return "v:" + key, nil
	}
	ctx := context.Background()
	if r, err := p.GetResult(ctx, "before", load); err != nil || r.FailedOpen || r.Source != SourceLoader {
		t.Fatalf("healthy Redis: %+v %v", r, err)
	}

	if err := srv.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	killed := time.Now()
	// Calls go on without Redis until the breaker opens.
	for i := 0; ; i++ {
		r, err := p.GetResult(ctx, fmt.Sprintf("down%d", i), load)
		if err != nil || !r.FailedOpen || r.Source != SourceLoader {
			t.Fatalf("Redis down, call %d: %+v %v, want the loader's value, failed open", i, r, err)
		}
		if _, ok := tr.first("redis", breaker.Open, killed); ok {
			break
		}
		if time.Since(killed) > 10*time.Second {
			t.Fatalf("Redis breaker not open 10s after the kill; transitions: %s", tr)
		}
	}

	if err := srv.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	restarted := time.Now()
	// Probe the way traffic would: one call after another, a new key each
	// time, until one no longer fails open.
	i := 0
	recovered := within(t, openTimeout+faultOpTimeout+schedMargin+5*time.Second, "L2 and lock back after the restart", func() bool {
		i++
		key := fmt.Sprintf("after%d", i)
		r, err := p.GetResult(ctx, key, load)
		if err != nil {
			t.Fatalf("after restart: %v", err)
		}
		if r.FailedOpen {
			return false
		}
		// Loaded under the lock and written to L2: check Redis has it
		// and that the next call is served from L2.
		if r.Source != SourceLoader {
			t.Fatalf("first call for %s: source %v, want loader", key, r.Source)
		}
		if n, err := direct.Exists(ctx, valueKey(t, p.Name(), key)).Result(); err != nil || n != 1 {
			t.Fatalf("value of %s not in Redis after a call that did not fail open: %d %v", key, n, err)
		}
		untilL1Stale(t, p, key)
		r2, err := p.GetResult(ctx, key, load)
		if err != nil || r2.Source != SourceL2 || r2.FailedOpen || r2.Value != "v:"+key {
			t.Fatalf("second call for %s: %+v %v, want the value from L2", key, r2, err)
		}
		return true
	})
	closed, ok := tr.first("redis", breaker.Closed, restarted)
	if !ok {
		t.Errorf("Redis breaker did not close after the restart; transitions: %s", tr)
	}
	t.Logf("FIGURES redis_restarted: recovered_after=%v breaker_closed_after=%v open_timeout=%v transitions=%s",
		recovered.Round(time.Millisecond), closed.Sub(restarted).Round(time.Millisecond), openTimeout, tr)
}

// valueKey returns the Redis key that holds the value of key in pipeline
// name (default prefix).
func valueKey(t *testing.T, name, key string) string {
	t.Helper()
	ks, err := rkey.New(DefaultPrefix, name)
	if err != nil {
		t.Fatal(err)
	}
	return ks.Value(key)
}

func TestFailOpen_redisPaused_whileLockHeld(t *testing.T) {
	// go-redis ignores context deadlines on socket reads unless
	// ContextTimeoutEnabled is set: the pipeline must bound every Redis
	// operation itself, with either client.
	cases := []struct {
		name   string
		client func(*redis.Options)
	}{
		{"ContextTimeoutEnabled", func(o *redis.Options) { o.ContextTimeoutEnabled = true }},
		{"default client", func(*redis.Options) {}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			const loadTime = 300 * time.Millisecond
			const callers = 32
			tr := &transitions{}
			p := build(t, New[string]("pausedlock").Cache(time.Minute).
				Redis(srv.Client(tc.client)).
				RedisOptions(RedisOptions{OpTimeout: faultOpTimeout, Breaker: breaker.Settings{Failures: 3, OpenTimeout: 500 * time.Millisecond}}).
				Lock(LockSettings{Lease: 3 * time.Second, Poll: 50 * time.Millisecond}).
				OnBreakerChange(tr.observe))
			loading := make(chan struct{})
			var once sync.Once
			var loads atomic.Int64
			load := func(ctx context.Context, key string) (string, error) {
				loads.Add(1)
				once.Do(func() { close(loading) })
				if err := sleepCtx(ctx, loadTime); err != nil {
					return "", err
				}
				return "v:" + key, nil
			}
			var (
				wg       sync.WaitGroup
				lat      latencies
				errCount atomic.Int64
				fo       atomic.Int64
			)
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					t0 := time.Now()
					r, err := p.GetResult(context.Background(), "hot", load)
					lat.add(time.Since(t0))
					if err != nil || r.Value != "v:hot" {
						errCount.Add(1)
					}
					if r.FailedOpen {
						fo.Add(1)
					}
				}()
			}
			select {
			case <-loading:
			case <-time.After(10 * time.Second):
				t.Fatal("no loader call within 10s")
			}
			if err := srv.Pause(); err != nil {
				t.Fatalf("Pause: %v", err)
			}
			paused := time.Now()
			waitGroupWithin(t, &wg, time.Minute)
			held := time.Since(paused)
			if err := srv.Resume(); err != nil {
				t.Fatalf("Resume: %v", err)
			}
			bound := redisOpsOnPath*faultOpTimeout + acquireCleanup + loadTime + schedMargin
			n, p99, maxD := lat.stats()
			if e := errCount.Load(); e != 0 {
				t.Errorf("%d of %d callers failed", e, n)
			}
			if loads.Load() != 1 {
				t.Errorf("loader called %d times, want once (one process, single flight)", loads.Load())
			}
			if maxD > bound {
				t.Errorf("a caller waited %v, want at most %v", maxD, bound)
			}
			t.Logf("FIGURES redis_paused_while_lock_held(%s): callers=%d errors=%d failed_open=%d p99=%v max=%v callers_done_after_pause=%v bound=%v",
				tc.name, n, errCount.Load(), fo.Load(), p99.Round(time.Millisecond), maxD.Round(time.Millisecond), held.Round(time.Millisecond), bound)
		})
	}
}

// loaderFault makes a loader fail in one way.
type loaderFault struct {
	name  string
	load  LoadFunc[string]
	cause func(error) bool // matches the error the fault produces
}

var errLoaderDown = errors.New("loader: database down")

func loaderFaults() []loaderFault {
	return []loaderFault{
		{"error", func(context.Context, string) (string, error) { return "", errLoaderDown },
			func(err error) bool { return errors.Is(err, errLoaderDown) }},
		{"panic", func(context.Context, string) (string, error) { panic("loader bug") },
			func(err error) bool { var pe *PanicError; return errors.As(err, &pe) }},
		{"timeout", func(ctx context.Context, _ string) (string, error) {
			// Honours ctx, so the test leaves no goroutine behind.
			<-ctx.Done()
			return "", ctx.Err()
		}, func(err error) bool { return errors.Is(err, ErrTimeout) }},
	}
}

func TestFallback_loaderFaults_staleThenDefaultThenError(t *testing.T) {
	srv := redistest.Start(t)
	const ttl, grace = 100 * time.Millisecond, time.Second
	for _, f := range loaderFaults() {
		t.Run(f.name, func(t *testing.T) {
			name := "fb-" + f.name
			pod := func(withDefault bool) *Pipeline[string] {
				b := New[string](name).Cache(ttl).Jitter(0).Stale(grace).Timeout(50 * time.Millisecond).
					Redis(srv.Client()).RedisOptions(RedisOptions{OpTimeout: faultOpTimeout}).
					Breaker(breaker.Settings{Failures: 100})
				if withDefault {
					b = b.DefaultValue("default")
				}
				return build(t, b)
			}
			a, b, noDefault := pod(true), pod(true), pod(false)
			ctx := context.Background()
			ok := func(context.Context, string) (string, error) { return "v1", nil }
			written := time.Now()
			if r, err := a.GetResult(ctx, "k", ok); err != nil || r.Value != "v1" || r.FailedOpen {
				t.Fatalf("load: %+v %v", r, err)
			}
			// Expired, within grace: a's L1 and Redis hold it stale.
			waitFor(t, func() bool { _, found, err := a.Peek(ctx, "k"); return !found && err == nil })
			for _, p := range []*Pipeline[string]{a, b} { // a: stale in L1 and L2; b: only in L2
				r, err := p.GetResult(ctx, "k", f.load)
				if time.Since(written) >= ttl+grace {
					t.Skip("machine too slow: the grace period ran out before the check")
				}
				if err != nil || r.Source != SourceStale || r.Value != "v1" || !f.cause(r.Cause) || r.FailedOpen {
					t.Fatalf("within grace: %+v %v, want the stale copy with the %s as cause", r, err, f.name)
				}
			}
			// Past grace: neither b's L1 nor Redis has a copy to serve.
			waitFor(t, func() bool {
				_, f1 := b.l1.Find("k")
				_, f2, err := b.co.Read(ctx, "k")
				return f1 == cache.Miss && f2 == cache.Miss && err == nil
			})
			r, err := b.GetResult(ctx, "k", f.load)
			if err != nil || r.Source != SourceDefault || r.Value != "default" || !f.cause(r.Cause) {
				t.Fatalf("past grace: %+v %v, want the default with the %s as cause", r, err, f.name)
			}
			r, err = noDefault.GetResult(ctx, "k", f.load)
			if err == nil || !f.cause(err) || r.Source != SourceNone || r.Value != "" {
				t.Fatalf("no stale, no default: %+v %v, want the %s", r, err, f.name)
			}
			t.Logf("FIGURES loader_%s: within grace -> source=stale err=nil; past grace -> source=default err=nil; no default -> err=%v", f.name, err)
		})
	}
}

func TestLoaderBreaker_opensProbesCloses(t *testing.T) {
	const openTimeout = 200 * time.Millisecond
	for _, f := range loaderFaults() {
		t.Run(f.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tr := &transitions{}
				name := "lb-" + f.name
				p := build(t, New[string](name).Cache(time.Minute).SingleFlight().Timeout(50*time.Millisecond).
					Breaker(breaker.Settings{Failures: 3, OpenTimeout: openTimeout}).
					DefaultValue("default").OnBreakerChange(tr.observe))
				var calls atomic.Int64
				failing := func(ctx context.Context, key string) (string, error) {
					calls.Add(1)
					return f.load(ctx, key)
				}
				ctx := context.Background()
				for i := range 3 {
					r, err := p.GetResult(ctx, fmt.Sprintf("f%d", i), failing)
					if err != nil || r.Source != SourceDefault || !f.cause(r.Cause) {
						t.Fatalf("failure %d: %+v %v", i, r, err)
					}
				}
				if p.br.State() != breaker.Open {
					t.Fatalf("state after 3 failures = %v, want open", p.br.State())
				}
				before := calls.Load()
				opened := time.Now()
				r, err := p.GetResult(ctx, "refused", failing)
				if err != nil || r.Source != SourceDefault || !errors.Is(r.Cause, breaker.ErrOpen) {
					t.Fatalf("open breaker: %+v %v, want the default for breaker.ErrOpen", r, err)
				}
				if calls.Load() != before {
					t.Fatal("the loader ran while its breaker was open")
				}
				// A failed probe re-opens it; a good one closes it. In the
				// bubble, the breaker goes half-open as soon as OpenTimeout has
				// passed on the bubble's clock.
				halfOpen := func() bool { return p.br.State() == breaker.HalfOpen }
				waitFor(t, halfOpen)
				if r, err := p.GetResult(ctx, "probe1", failing); err != nil || r.Source != SourceDefault {
					t.Fatalf("failed probe: %+v %v", r, err)
				}
				if calls.Load() != before+1 {
					t.Fatalf("half-open let %d calls through, want 1", calls.Load()-before)
				}
				waitFor(t, halfOpen)
				if r, err := p.GetResult(ctx, "probe2", func(context.Context, string) (string, error) { return "ok", nil }); err != nil || r.Source != SourceLoader {
					t.Fatalf("good probe: %+v %v", r, err)
				}
				recovered := time.Since(opened)
				want := "lb-" + f.name + ":closed>open lb-" + f.name + ":open>half-open lb-" + f.name + ":half-open>open " +
					"lb-" + f.name + ":open>half-open lb-" + f.name + ":half-open>closed "
				if got := tr.String(); got != want {
					t.Fatalf("transitions = %q, want %q", got, want)
				}
				t.Logf("FIGURES loader_breaker_open(%s): refused calls get source=default cause=breaker.ErrOpen, loader not called; closed %v after opening (open timeout %v, one failed probe)",
					f.name, recovered.Round(time.Millisecond), openTimeout)
			})
		})
	}
}

func TestLoaderBreaker_callerCancellationNeverTrips(t *testing.T) {
	cases := []struct {
		name   string
		sf     bool
		ctx    func() (context.Context, context.CancelFunc)
		during bool // cancel while the loader runs, rather than before
	}{
		{"canceled before the call", false, func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, false},
		{"canceled during the load", false, func() (context.Context, context.CancelFunc) {
			return context.WithCancel(context.Background())
		}, true},
		{"caller deadline during the load", false, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 10*time.Millisecond)
		}, false},
		{"caller deadline, single flight", true, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 10*time.Millisecond)
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := &transitions{}
			b := New[string]("cancel").Cache(time.Minute).Timeout(time.Second).
				Breaker(breaker.Settings{Failures: 2, OpenTimeout: time.Minute}).OnBreakerChange(tr.observe)
			if tc.sf {
				b = b.SingleFlight()
			}
			p := build(t, b)
			var running atomic.Int64 // loaders still running, for a clean exit
			for i := range 6 {
				ctx, cancel := tc.ctx()
				started := make(chan struct{})
				load := func(lctx context.Context, _ string) (string, error) {
					running.Add(1)
					defer running.Add(-1)
					close(started)
					if err := sleepCtx(lctx, 200*time.Millisecond); err != nil {
						return "", err
					}
					return "late", nil
				}
				if tc.during {
					go func() {
						select {
						case <-started:
						case <-time.After(5 * time.Second):
						}
						cancel()
					}()
				}
				_, err := p.GetResult(ctx, fmt.Sprintf("k%d", i), load)
				if !tc.during {
					cancel()
				}
				if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("call %d: err = %v, want the caller's own ctx error", i, err)
				}
			}
			waitFor(t, func() bool { return running.Load() == 0 })
			// One real failure must not open it (Failures: 2): the
			// cancellations did not count as failures in a row.
			_, _ = p.GetResult(context.Background(), "real", func(context.Context, string) (string, error) { return "", errLoaderDown })
			if s := p.br.State(); s != breaker.Closed {
				t.Fatalf("state = %v after caller cancellations and one failure, want closed; transitions: %s", s, tr)
			}
			if got := tr.String(); got != "" {
				t.Fatalf("transitions = %q, want none", got)
			}
		})
	}
}

func TestLoaderBreaker_slowCallCountsAsFailure(t *testing.T) {
	tr := &transitions{}
	p := build(t, New[string]("slow").Cache(time.Minute).
		Breaker(breaker.Settings{Failures: 2, SlowCall: 30 * time.Millisecond, OpenTimeout: time.Minute}).
		DefaultValue("default").OnBreakerChange(tr.observe))
	var calls atomic.Int64
	loader := func(d time.Duration) LoadFunc[string] {
		return func(ctx context.Context, key string) (string, error) {
			calls.Add(1)
			if err := sleepCtx(ctx, d); err != nil {
				return "", err
			}
			return "v:" + key, nil
		}
	}
	slow, fast := loader(150*time.Millisecond), loader(0)
	ctx := context.Background()
	steps := []struct {
		key  string
		load LoadFunc[string]
		want breaker.State
	}{
		{"s1", slow, breaker.Closed}, // 1 slow
		{"f1", fast, breaker.Closed}, // a fast success resets the run
		{"s2", slow, breaker.Closed}, // 1 slow
		{"s3", slow, breaker.Open},   // 2 slow in a row
	}
	for _, s := range steps {
		r, err := p.GetResult(ctx, s.key, s.load)
		// A slow call still returns its own value to its caller.
		if err != nil || r.Source != SourceLoader || r.Value != "v:"+s.key {
			t.Fatalf("%s: %+v %v, want the loader's value", s.key, r, err)
		}
		if got := p.br.State(); got != s.want {
			t.Fatalf("after %s: state %v, want %v", s.key, got, s.want)
		}
	}
	before := calls.Load()
	r, err := p.GetResult(ctx, "refused", fast)
	if err != nil || r.Source != SourceDefault || !errors.Is(r.Cause, breaker.ErrOpen) || calls.Load() != before {
		t.Fatalf("after slow calls: %+v %v, want the default without a loader call", r, err)
	}
}

func TestOnBreakerChange_callbackCallsPipeline_noDeadlock(t *testing.T) {
	srv := redistest.Start(t)
	var p *Pipeline[string]
	var nested atomic.Int64
	var nestedErr atomic.Value
	ok := func(_ context.Context, key string) (string, error) { return "v:" + key, nil }
	tr := &transitions{}
	cb := func(name string, from, to breaker.State) {
		tr.observe(name, from, to)
		// Back into the pipeline and both breakers, from the callback.
		_ = p.br.State()
		_ = p.redisGuard.Breaker.State()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := p.Get(ctx, "cb:"+name+":"+to.String(), ok); err != nil && !errors.Is(err, ErrNotFound) {
			nestedErr.CompareAndSwap(nil, err)
		}
		nested.Add(1)
	}
	var err error
	const openTimeout = 100 * time.Millisecond
	p, err = New[string]("reentrant").Cache(time.Minute).SingleFlight().
		Redis(srv.Client()).RedisOptions(RedisOptions{OpTimeout: faultOpTimeout, Breaker: breaker.Settings{Failures: 2, OpenTimeout: openTimeout}}).
		Breaker(breaker.Settings{Failures: 2, OpenTimeout: openTimeout}).
		DefaultValue("default").OnBreakerChange(cb).Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })

	opened, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		ctx := context.Background()
		fail := func(context.Context, string) (string, error) { return "", errLoaderDown }
		for i := range 3 { // the loader breaker opens
			_, _ = p.Get(ctx, fmt.Sprintf("lf%d", i), fail)
		}
		_ = srv.Kill()
		for i := range 3 { // the Redis breaker opens
			_, _ = p.Get(ctx, fmt.Sprintf("rf%d", i), ok)
		}
		opened <- struct{}{}
		<-opened
		_, _ = p.Get(ctx, "probe", ok) // both half-open, the loader's closes
	}()
	deadlock := time.After(30 * time.Second)
	select {
	case <-opened:
	case <-deadlock:
		t.Fatal("deadlock: calls that open the breakers did not return within 30s")
	}
	// Both breakers opened (the callback saw it) more than OpenTimeout ago:
	// the probe finds them half-open.
	within(t, 10*time.Second, "both breakers open for longer than their OpenTimeout", func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		n := 0
		for _, x := range tr.list {
			if x.to == breaker.Open {
				n++
				if time.Since(x.at) <= openTimeout {
					return false
				}
			}
		}
		return n >= 2
	})
	opened <- struct{}{}
	select {
	case <-done:
	case <-deadlock:
		t.Fatal("deadlock: calls that change breaker states did not return within 30s")
	}
	if nested.Load() < 4 {
		t.Fatalf("callback ran %d times, want at least 4 (each breaker opened and went half-open)", nested.Load())
	}
	if e := nestedErr.Load(); e != nil {
		t.Fatalf("nested call from the callback failed: %v", e)
	}
}

func TestL2_corruptBytes_missReloadedCounted(t *testing.T) {
	srv := redistest.Start(t)
	header := func(version byte, payload string) []byte {
		b := make([]byte, 43, 43+len(payload))
		b[0], b[1] = 0xC4, version
		now := time.Now()
		binary.BigEndian.PutUint64(b[3:], uint64(now.UnixNano()))
		binary.BigEndian.PutUint64(b[11:], uint64(now.Add(time.Hour).UnixNano()))
		binary.BigEndian.PutUint64(b[19:], uint64(now.Add(time.Hour).UnixNano()))
		return append(b, payload...)
	}
	cases := []struct {
		name  string
		write func(ctx context.Context, c *redis.Client, key string) error
	}{
		{"garbage", func(ctx context.Context, c *redis.Client, key string) error {
			return c.HSet(ctx, key, rkey.FieldData, "\x00\xffnot an envelope", rkey.FieldFence, "0").Err()
		}},
		{"truncated header", func(ctx context.Context, c *redis.Client, key string) error {
			return c.HSet(ctx, key, rkey.FieldData, header(1, `"x"`)[:20], rkey.FieldFence, "0").Err()
		}},
		{"unknown version", func(ctx context.Context, c *redis.Client, key string) error {
			return c.HSet(ctx, key, rkey.FieldData, header(9, `"x"`), rkey.FieldFence, "0").Err()
		}},
		{"payload not JSON", func(ctx context.Context, c *redis.Client, key string) error {
			return c.HSet(ctx, key, rkey.FieldData, header(1, `{not json`), rkey.FieldFence, "0").Err()
		}},
		{"wrong type", func(ctx context.Context, c *redis.Client, key string) error {
			return c.Set(ctx, key, "a string, not a hash", 0).Err()
		}},
	}
	direct := srv.Client()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("corrupt%d", i)
			tr := &transitions{}
			pod := func() *Pipeline[string] {
				// No lock: one L2 read on the path (the lock stage re-reads
				// under the lock, and would count the bad bytes twice).
				return build(t, New[string](name).Cache(time.Minute).SingleFlight().
					Redis(srv.Client()).RedisOptions(RedisOptions{OpTimeout: time.Second}).OnBreakerChange(tr.observe))
			}
			a, b := pod(), pod()
			ctx := context.Background()
			if err := tc.write(ctx, direct, valueKey(t, name, "k")); err != nil {
				t.Fatal(err)
			}
			var loads atomic.Int64
			load := func(context.Context, string) (string, error) { loads.Add(1); return "fresh", nil }
			r, err := a.GetResult(ctx, "k", load)
			if err != nil || r.Source != SourceLoader || r.Value != "fresh" || r.FailedOpen {
				t.Fatalf("corrupt L2: %+v %v, want a miss reloaded by the loader", r, err)
			}
			if n := a.l2.Corrupted(); n != 1 {
				t.Fatalf("Corrupted() = %d, want 1", n)
			}
			// The reload replaced the bad bytes: another pod reads them.
			r, err = b.GetResult(ctx, "k", load)
			if err != nil || r.Source != SourceL2 || r.Value != "fresh" {
				t.Fatalf("after reload: %+v %v, want the value from L2", r, err)
			}
			if loads.Load() != 1 || b.l2.Corrupted() != 0 {
				t.Fatalf("loads = %d, corrupted on b = %d, want 1 and 0", loads.Load(), b.l2.Corrupted())
			}
			if got := tr.String(); got != "" {
				t.Fatalf("breaker transitions %q: corrupt bytes are not a Redis failure", got)
			}
		})
	}
}
