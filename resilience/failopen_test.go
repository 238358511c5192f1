package resilience

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/breaker"
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
// Figures for the README's failure-mode table are logged with t.Logf; run
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
	for _, x := range tr.list {
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
				return b.Lock(LockSettings{Lease: 10 * time.Second, Wait: 5 * time.Second, Poll: 50 * time.Millisecond})
			})
	}
	var loads [pods]atomic.Int64
	loading := make(chan struct{})
	var once sync.Once
	loader := func(pod int) LoadFunc[string] {
		return func(ctx context.Context, key string) (string, error) {
			loads[pod].Add(1)
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
			return b.Lock(LockSettings{Lease: 5 * time.Second, Wait: time.Second, Poll: 50 * time.Millisecond})
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
			return b.L1TTL(time.Millisecond).Lock(LockSettings{Lease: 5 * time.Second, Wait: time.Second, Poll: 50 * time.Millisecond})
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
	// Probe the way traffic would: one call every 20ms, a new key each time.
	var recovered time.Duration
	for i := 0; ; i++ {
		key := fmt.Sprintf("after%d", i)
		r, err := p.GetResult(ctx, key, load)
		if err != nil {
			t.Fatalf("after restart: %v", err)
		}
		if !r.FailedOpen {
			// Loaded under the lock and written to L2: check Redis has it
			// and that the next call is served from L2.
			if r.Source != SourceLoader {
				t.Fatalf("first call for %s: source %v, want loader", key, r.Source)
			}
			if n, err := direct.Exists(ctx, valueKey(t, p.Name(), key)).Result(); err != nil || n != 1 {
				t.Fatalf("value of %s not in Redis after a call that did not fail open: %d %v", key, n, err)
			}
			time.Sleep(5 * time.Millisecond) // past L1TTL
			r2, err := p.GetResult(ctx, key, load)
			if err != nil || r2.Source != SourceL2 || r2.FailedOpen || r2.Value != "v:"+key {
				t.Fatalf("second call for %s: %+v %v, want the value from L2", key, r2, err)
			}
			recovered = time.Since(restarted)
			break
		}
		if time.Since(restarted) > openTimeout+faultOpTimeout+schedMargin+5*time.Second {
			t.Fatalf("L2 and lock not back %v after the restart; transitions: %s", time.Since(restarted), tr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if bound := openTimeout + redisOpsOnPath*faultOpTimeout + schedMargin; recovered > bound {
		t.Errorf("recovered %v after the restart, want within %v (open timeout + one probe + margin)", recovered, bound)
	}
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
	cases := []struct {
		name   string
		client func(*redis.Options)
	}{
		// go-redis ignores context deadlines on socket reads unless
		// ContextTimeoutEnabled is set; the lock stage relies on them.
		{"ContextTimeoutEnabled", func(o *redis.Options) { o.ContextTimeoutEnabled = true }},
	}
	if os.Getenv("HERDGUARD_DEFAULT_CLIENT_LOCK_PAUSE") != "" {
		cases = append(cases, struct {
			name   string
			client func(*redis.Options)
		}{"default client", func(*redis.Options) {}})
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
				Lock(LockSettings{Lease: 3 * time.Second, Wait: time.Second, Poll: 50 * time.Millisecond}).
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
