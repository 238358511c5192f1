package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/lock"
	"github.com/herdguard/herdguard/resilience"
)

// TestMain doubles as a pod: a test re-executes this binary with the pod's
// configuration in its environment (the standard helper-process pattern).
func TestMain(m *testing.M) {
	if os.Getenv(podEnv) != "" {
		os.Exit(childMain())
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// testSpawner runs a pod as this test binary (TestMain sees podEnv).
func testSpawner() *exec.Cmd { return exec.Command(os.Args[0], "-test.run=^$") }

// robust are settings that keep a loaded two-core machine running -race
// from looking like a failing Redis: a Redis operation may take seconds
// there, and the default 200 ms timeout would make the pipeline fail open
// (and load unlocked), which is right for a sick Redis but not what these
// tests are about.
const robustOpTimeout = 5 * time.Second

func startFleet(t *testing.T, addr string, n, callers int, load time.Duration, l lockSettings) (*Fleet, string) {
	t.Helper()
	name := fmt.Sprintf("t-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), rand.Int())
	cfgs := make([]podConfig, n)
	for i := range cfgs {
		cfgs[i] = podConfig{Pod: i, Mode: modePipeline, Addr: addr, Name: name, Callers: callers,
			Load: load, Lock: l, OpTimeout: robustOpTimeout}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f, err := StartFleet(ctx, testSpawner, cfgs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("fleet: %v", err)
		}
	})
	return f, name
}

// TestHarness_8x64_oneLoadEveryRound: 8 processes of 64 goroutines, a
// 200 ms loader, 20 rounds with fresh keys, against the harness's own
// private redis-server: exactly one loader call in every round, and every
// caller gets that call's value.
func TestHarness_8x64_oneLoadEveryRound(t *testing.T) {
	cfg := Config{Pods: 8, Callers: 64, Load: 200 * time.Millisecond, Rounds: 20,
		OpTimeout: robustOpTimeout, Spawn: testSpawner, RoundTimeout: 2 * time.Minute}
	var rounds []RoundStats
	if err := Run(context.Background(), cfg, func(s RoundStats) { rounds = append(rounds, s) }); err != nil {
		t.Fatal(err)
	}
	if len(rounds) != 20 {
		t.Fatalf("got %d rounds, want 20", len(rounds))
	}
	for _, s := range rounds {
		if s.LoaderCalls != 1 || s.Errors != 0 || s.FailOpen != 0 || s.Answered != 512 || len(s.Values) != 1 {
			t.Errorf("round %d: loader_calls=%d errors=%d fail_open=%d answered=%d values=%v problems=%v; want 1 load, 512 answers of one value",
				s.Round, s.LoaderCalls, s.Errors, s.FailOpen, s.Answered, s.Values, s.PodErrors)
		}
		for v, n := range s.Values {
			if !strings.HasPrefix(v, s.Key+"@pod") || n != 512 {
				t.Errorf("round %d: value %q for %d callers", s.Round, v, n)
			}
		}
	}
	t.Logf("last round: %+v", rounds[len(rounds)-1])
}

// TestHarness_killRedis: with Redis SIGKILLed mid-round the harness keeps
// counting: it finishes every round, reports the loads it saw over the
// pipes, and calls fail open rather than fail.
func TestHarness_killRedis(t *testing.T) {
	cfg := Config{Pods: 3, Callers: 8, Load: 300 * time.Millisecond, Rounds: 2,
		KillRedisAfter: 100 * time.Millisecond, Spawn: testSpawner, RoundTimeout: 2 * time.Minute}
	var rounds []RoundStats
	if err := Run(context.Background(), cfg, func(s RoundStats) { rounds = append(rounds, s) }); err != nil {
		t.Fatal(err)
	}
	if len(rounds) != 2 {
		t.Fatalf("got %d rounds, want 2", len(rounds))
	}
	r2 := rounds[1]
	// Round 2 runs with Redis gone: each pod loads once for itself (its
	// single-flight still holds) and every caller gets a value.
	if r2.LoaderCalls != 3 || r2.Errors != 0 || r2.FailOpen != 24 || r2.RedisCommands != -1 {
		t.Errorf("round 2 without Redis: %+v; want 3 loads, 0 errors, 24 fail-opens, redis_commands -1", r2)
	}
	if r1 := rounds[0]; r1.Answered != 24 || r1.LoaderCalls < 1 || r1.LoaderCalls > 3 {
		t.Errorf("round 1 (Redis killed mid-round): %+v; want 24 answers and 1 to 3 loads", r1)
	}
}

// TestSlowLoader_liveness: a loader slower (8 s) than the wait budget (the
// default 5 s) still runs once across processes: waiters keep waiting past
// the budget while the holder's watchdog extends its lease.
func TestSlowLoader_liveness(t *testing.T) {
	srv := redistest.Start(t)
	f, _ := startFleet(t, srv.Addr(), 3, 8, 8*time.Second, lockSettings{})
	start := time.Now().Add(100 * time.Millisecond)
	for i := range f.Len() {
		if err := f.Go(i, "slow", start, 0); err != nil {
			t.Fatal(err)
		}
	}
	values := map[string]int{}
	for i := range f.Len() {
		r, err := f.Result(i, "slow", 2*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if r.Errors != 0 || r.FailOpen != 0 {
			t.Errorf("pod %d: %d errors (%s), %d fail-opens", i, r.Errors, r.ErrSample, r.FailOpen)
		}
		for v, n := range r.Values {
			values[v] += n
		}
	}
	if n := f.Loads("slow"); n != 1 {
		t.Errorf("loader calls = %d, want 1", n)
	}
	if len(values) != 1 {
		t.Errorf("values = %v, want one value for all 24 callers", values)
	}
}

// TestHolderKilled_oneTakeover: the process holding the lock is SIGKILLed
// mid-load; once its lease (2 s here) runs out, exactly one waiter takes
// the lock over and loads, and every surviving caller gets its value. No
// deadlock; one extra load in all.
func TestHolderKilled_oneTakeover(t *testing.T) {
	srv := redistest.Start(t)
	f, _ := startFleet(t, srv.Addr(), 4, 16, 200*time.Millisecond,
		lockSettings{Lease: 2 * time.Second, MaxWait: 40 * time.Second})
	const key = "victim"
	if err := f.Go(0, key, time.Now(), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := f.WaitLoad(0, key, time.Minute); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := 1; i < f.Len(); i++ {
		if err := f.Go(i, key, start, 0); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond) // let the waiters start waiting
	if err := f.Kill(0); err != nil {
		t.Fatal(err)
	}
	values := map[string]int{}
	for i := 1; i < f.Len(); i++ {
		r, err := f.Result(i, key, 2*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if r.Errors != 0 || r.FailOpen != 0 {
			t.Errorf("pod %d: %d errors (%s), %d fail-opens", i, r.Errors, r.ErrSample, r.FailOpen)
		}
		for v, n := range r.Values {
			values[v] += n
		}
	}
	if n := f.Loads(key); n != 2 {
		t.Errorf("loader calls = %d, want 2 (the killed holder's and one takeover)", n)
	}
	if len(values) != 1 {
		t.Errorf("values = %v, want one value for all 48 surviving callers", values)
	}
	for v := range values {
		if strings.HasSuffix(v, "@pod0") {
			t.Errorf("value %q comes from the killed pod", v)
		}
	}
}

// TestSupersededHolder_writeRefused: the holder's process is frozen
// (SIGSTOP) mid-load, so its watchdog cannot extend the lease; the lease
// runs out, another process takes the lock (a newer fence), loads and
// writes. When the frozen holder resumes and its loader returns, its late
// write-back is refused by the fence: Redis keeps the newer value.
func TestSupersededHolder_writeRefused(t *testing.T) {
	srv := redistest.Start(t)
	f, name := startFleet(t, srv.Addr(), 2, 4, 50*time.Millisecond,
		lockSettings{Lease: 2 * time.Second, MaxWait: 60 * time.Second})
	const key = "fenced"
	if err := f.Go(0, key, time.Now(), 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := f.WaitLoad(0, key, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := f.Signal(0, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = f.Signal(0, syscall.SIGCONT)
		}
	}()
	if err := f.Go(1, key, time.Now(), 0); err != nil {
		t.Fatal(err)
	}
	r1, err := f.Result(1, key, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if r1.Errors != 0 || r1.Values[key+"@pod1"] != 4 {
		t.Fatalf("pod 1 while pod 0 is frozen: %+v; want all 4 callers to get pod 1's value", r1)
	}
	if n := f.Loads(key); n != 2 {
		t.Fatalf("loads = %d, want 2 (frozen holder, then the takeover)", n)
	}
	resumed = true
	if err := f.Signal(0, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	r0, err := f.Result(0, key, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if r0.Errors != 0 || r0.Values[key+"@pod0"] != 4 {
		t.Errorf("pod 0 after resuming: %+v; want its own loader's value", r0)
	}
	// pod 0 has now written back (or been refused): Redis must hold pod 1's
	// value, which the newer fence kept from pod 0's late write.
	rc := srv.Client()
	store, err := cache.NewRedis[string](rc, cache.RedisOptions{Namespace: name})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, fr, err := store.Get(ctx, key)
	if err != nil || fr != cache.Fresh {
		t.Fatalf("L2 get: %v %v", fr, err)
	}
	if e.Value != key+"@pod1" {
		t.Errorf("L2 holds %q; want the takeover's %q", e.Value, key+"@pod1")
	}
}

// scanLocks returns the lock keys left on the server.
func scanLocks(t *testing.T, rc *redis.Client) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var keys []string
	it := rc.Scan(ctx, 0, "*:lock", 1000).Iterator()
	for it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestCancelledCallers_noLockLeft: 1,000 callers on 4 pipelines (a client
// each, as 4 pods) over 10 keys, each caller's context cancelled at a
// random point (some before the call); the pipelines' own deadlines are
// short too (Redis operations of 1 to 20 ms, flights of 150 ms on two of
// them), so acquires, loads and waits are cut off mid-way. Once every load
// has finished (Close waits for them), no lock key is left in Redis.
func TestCancelledCallers_noLockLeft(t *testing.T) {
	srv := redistest.Start(t)
	type variant struct {
		op, flight time.Duration
	}
	variants := []variant{{time.Millisecond, 0}, {3 * time.Millisecond, 150 * time.Millisecond},
		{20 * time.Millisecond, 150 * time.Millisecond}, {robustOpTimeout, 0}}
	var pipes []*resilience.Pipeline[string]
	for _, v := range variants {
		b := resilience.New[string]("cancel").Cache(time.Minute).
			Redis(srv.Client()).RedisOptions(resilience.RedisOptions{OpTimeout: v.op}).
			Lock(resilience.LockSettings{MaxWait: 2 * time.Second, Poll: 20 * time.Millisecond})
		if v.flight > 0 {
			b = b.Timeout(v.flight).FlightTimeout(v.flight)
		}
		p, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		pipes = append(pipes, p)
	}
	closed := false
	defer func() {
		if !closed {
			for _, p := range pipes {
				_ = p.Close()
			}
		}
	}()
	var loads atomic.Int64
	load := func(ctx context.Context, key string) (string, error) {
		loads.Add(1)
		t := time.NewTimer(time.Duration(rand.IntN(300)) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
			return "v:" + key, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	var wg sync.WaitGroup
	var cancelled, answered atomic.Int64
	for i := range 1000 {
		p := pipes[i%len(pipes)]
		key := fmt.Sprintf("k%d", rand.IntN(10))
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if i%10 == 0 {
				cancel() // gone before the call
			} else {
				time.AfterFunc(time.Duration(rand.IntN(400))*time.Millisecond, cancel)
			}
			time.Sleep(time.Duration(rand.IntN(200)) * time.Millisecond)
			_, err := p.GetResult(ctx, key, load)
			switch {
			case errors.Is(err, context.Canceled):
				cancelled.Add(1)
			default:
				answered.Add(1)
			}
		})
	}
	wg.Wait()
	closed = true
	for _, p := range pipes {
		if err := p.Close(); err != nil { // waits for the shared loads
			t.Errorf("Close: %v", err)
		}
	}
	if cancelled.Load() == 0 || answered.Load() == 0 {
		t.Errorf("cancelled=%d answered=%d: the test should see both", cancelled.Load(), answered.Load())
	}
	if left := scanLocks(t, srv.Client()); len(left) > 0 {
		t.Errorf("lock keys left behind: %v", left)
	}
	t.Logf("cancelled=%d answered=%d loads=%d", cancelled.Load(), answered.Load(), loads.Load())
}

// TestLockAcquire_cancelledMidCall_noOrphans: 1,000 acquires whose
// contexts end at random points within the round trip (0 to 2 ms), on 20
// keys; every granted lease is released. The acquires whose outcome was
// unknown must have been cleaned up by token: no lock key is left.
func TestLockAcquire_cancelledMidCall_noOrphans(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client()
	lk, err := lock.NewRedis(rc, lock.RedisOptions{Namespace: "acq"})
	if err != nil {
		t.Fatal(err)
	}
	// Cut-off points spread over what 1,000 concurrent acquires take, scaled
	// by a round trip measured here so that a slow (-race, loaded) machine
	// still sees acquires cut off before, during and after the script runs.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t0 := time.Now()
	for range 20 {
		l, err := lk.TryAcquire(ctx, "probe", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	span := max(time.Since(t0)/20, 100*time.Microsecond) // acquire + release: two round trips
	var wg sync.WaitGroup
	var granted, unknown atomic.Int64
	for i := range 1000 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), rand.N(10*span+10*time.Millisecond))
			defer cancel()
			l, err := lk.TryAcquire(ctx, fmt.Sprintf("k%d", i%20), time.Minute)
			switch {
			case err == nil:
				granted.Add(1)
				rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer rcancel()
				if err := l.Release(rctx); err != nil {
					t.Errorf("release: %v", err)
				}
			case errors.Is(err, backend.ErrNotAcquired):
			default:
				unknown.Add(1)
			}
		})
	}
	wg.Wait()
	lk.Wait() // the deletes after acquires whose outcome was unknown
	if left := scanLocks(t, rc); len(left) > 0 {
		t.Errorf("lock keys left behind: %v", left)
	}
	if unknown.Load() == 0 {
		t.Errorf("no acquire was cut off (span %v): the test proved nothing", span)
	}
	t.Logf("span=%v granted=%d cut off=%d", span, granted.Load(), unknown.Load())
}

// TestCluster_oneLoadPerRound: the one-load guarantee on a 3-master Redis
// Cluster: 4 pipelines (each with its own cluster client, as 4 pods) of 32
// goroutines, 5 rounds on fresh keys spread over the slots.
func TestCluster_oneLoadPerRound(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	var pipes []*resilience.Pipeline[string]
	for range 4 {
		p, err := resilience.New[string]("cluster").Cache(time.Minute).
			Redis(c.Client()).RedisOptions(resilience.RedisOptions{OpTimeout: robustOpTimeout}).
			Lock(resilience.LockSettings{}).Build()
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		pipes = append(pipes, p)
	}
	for round := range 5 {
		key := fmt.Sprintf("round-%d-%d", round, rand.Int())
		var loads atomic.Int64
		load := func(ctx context.Context, key string) (string, error) {
			loads.Add(1)
			time.Sleep(100 * time.Millisecond)
			return "v:" + key, nil
		}
		var wg sync.WaitGroup
		var bad atomic.Int64
		gate := make(chan struct{})
		for _, p := range pipes {
			for range 32 {
				wg.Go(func() {
					<-gate
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					r, err := p.GetResult(ctx, key, load)
					if err != nil || r.Value != "v:"+key || r.FailedOpen {
						bad.Add(1)
						t.Errorf("round %d: %+v, %v", round, r, err)
					}
				})
			}
		}
		close(gate)
		wg.Wait()
		if n := loads.Load(); n != 1 {
			t.Errorf("round %d (key %q): loader calls = %d, want 1", round, key, n)
		}
	}
}
