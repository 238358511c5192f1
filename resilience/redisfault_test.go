package resilience

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/redistest"
)

// The tests in this file hold the pipeline's promise that no call waits on
// Redis longer than the operation timeout, dials and client retries
// included, with go-redis clients that keep their defaults (MaxRetries 3,
// ReadTimeout 3 s, DialTimeout 5 s), with ContextTimeoutEnabled off (the
// client's default) and on, and with the library's defaults (a 200 ms
// operation timeout). Each fault (Redis not started, killed, paused with
// SIGSTOP, black-holed or slowed by a proxy) lasts several seconds while callers ask for
// new keys; each call must fail open (its loader ran) within the
// operation timeout, the loader and a margin, where go-redis alone holds
// a call for seconds. Once the fault ends, two pods are back to locked
// rounds through L2 within a few seconds.

const (
	// faultLoad is the loader's time in these tests.
	faultLoad = 20 * time.Millisecond
	// faultBound is the longest call these tests accept during a fault:
	// the default operation timeout, the loader, and a margin that a
	// loaded two-core machine under -race keeps. Without the bound on
	// dials and client retries, calls take 1.7 to 12 seconds.
	faultBound = time.Second
	// faultLasts is how long each fault lasts: past the client's 3 s
	// ReadTimeout, so that go-redis retries a timed-out read.
	faultLasts = 4 * time.Second
	// recoverWithin bounds how long after a fault the pods take to be
	// back to clean rounds: the breaker's open time (1 s) and a probe.
	recoverWithin = 15 * time.Second
)

// fault is one way for Redis to fail: start brings it on (with the pods
// built), end takes it away.
type fault struct {
	name       string
	viaProxy   bool
	beforePods bool // the fault starts before the pods' first call
	start, end func(t *testing.T, srv *redistest.Server, px *redistest.Proxy)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var faults = []fault{
	{name: "notStarted", beforePods: true,
		start: func(t *testing.T, srv *redistest.Server, _ *redistest.Proxy) { must(t, srv.Kill()) },
		end:   func(t *testing.T, srv *redistest.Server, _ *redistest.Proxy) { must(t, srv.Restart()) }},
	{name: "killed",
		start: func(t *testing.T, srv *redistest.Server, _ *redistest.Proxy) { must(t, srv.Kill()) },
		end:   func(t *testing.T, srv *redistest.Server, _ *redistest.Proxy) { must(t, srv.Restart()) }},
	{name: "paused",
		start: func(t *testing.T, srv *redistest.Server, _ *redistest.Proxy) { must(t, srv.Pause()) },
		end:   func(t *testing.T, srv *redistest.Server, _ *redistest.Proxy) { must(t, srv.Resume()) }},
	{name: "blackhole", viaProxy: true,
		start: func(_ *testing.T, _ *redistest.Server, px *redistest.Proxy) { px.Blackhole() },
		end:   func(_ *testing.T, _ *redistest.Server, px *redistest.Proxy) { px.Restore() }},
	{name: "latency1s", viaProxy: true,
		start: func(_ *testing.T, _ *redistest.Server, px *redistest.Proxy) { px.Delay(time.Second) },
		end:   func(_ *testing.T, _ *redistest.Server, px *redistest.Proxy) { px.Delay(0) }},
}

func TestFailOpen_defaultClient_callsWithinOpTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("faults last seconds each")
	}
	for _, f := range faults {
		for _, ctxTimeout := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/ContextTimeoutEnabled=%v", f.name, ctxTimeout), func(t *testing.T) {
				testDefaultClientFault(t, f, ctxTimeout)
			})
		}
	}
}

func testDefaultClientFault(t *testing.T, f fault, ctxTimeout bool) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	var px *redistest.Proxy
	if f.viaProxy {
		px = redistest.StartProxy(t, addr)
		addr = px.Addr()
	}
	// Both pods run library defaults on clients with go-redis's defaults.
	pods := make([]*Pipeline[string], 2)
	for i := range pods {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: ctxTimeout})
		t.Cleanup(func() { _ = rdb.Close() })
		pods[i] = build(t, New[string]("fault").Cache(time.Minute).Redis(rdb).Lock(LockSettings{}))
	}
	var loads atomic.Int64
	load := func(ctx context.Context, key string) (string, error) {
		loads.Add(1)
		if err := sleepCtx(ctx, faultLoad); err != nil {
			return "", err
		}
		return "v:" + key, nil
	}
	if f.beforePods {
		f.start(t, srv, px)
	} else {
		cleanRound(t, pods, "warm", load)
		f.start(t, srv, px)
	}
	ended := false
	defer func() {
		if !ended {
			f.end(t, srv, px)
		}
	}()

	const callers = 8
	var (
		wg             sync.WaitGroup
		lat            latencies
		calls, failed  atomic.Int64
		notOpen, wrong atomic.Int64
	)
	until := time.Now().Add(faultLasts)
	for w := range callers {
		wg.Go(func() {
			p := pods[w%len(pods)]
			for i := 0; time.Now().Before(until); i++ {
				key := fmt.Sprintf("k%d-%d", w, i)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				t0 := time.Now()
				r, err := p.GetResult(ctx, key, load)
				lat.add(time.Since(t0))
				cancel()
				calls.Add(1)
				switch {
				case err != nil:
					failed.Add(1)
				case r.Value != "v:"+key || r.Source != SourceLoader:
					wrong.Add(1)
				case !r.FailedOpen:
					notOpen.Add(1)
				}
			}
		})
	}
	waitGroupWithin(t, &wg, faultLasts+time.Minute)
	f.end(t, srv, px)
	ended = true
	over := time.Now()

	n, p99, worst := lat.stats()
	t.Logf("FIGURES fault=%s ctxTimeout=%v calls=%d failed=%d not_failed_open=%d p99=%v max=%v",
		f.name, ctxTimeout, n, failed.Load(), notOpen.Load(), p99.Round(time.Millisecond), worst.Round(time.Millisecond))
	if failed.Load() != 0 || wrong.Load() != 0 {
		t.Errorf("%d of %d calls failed and %d got a wrong value during the fault; want every call served by its loader",
			failed.Load(), n, wrong.Load())
	}
	if notOpen.Load() == int64(n) {
		t.Errorf("no call of %d failed open during the fault", n)
	}
	if worst > faultBound {
		t.Errorf("a call took %v during the fault (p99 %v); want at most %v (operation timeout %v + loader %v + margin)",
			worst, p99, faultBound, DefaultRedisTimeout, faultLoad)
	}
	back := recoverClean(t, pods, load)
	t.Logf("FIGURES fault=%s ctxTimeout=%v clean_after=%v", f.name, ctxTimeout, back.Sub(over).Round(time.Millisecond))
}

// cleanRound runs one locked round through L2 on pods: the first loads
// key under the lock and writes it back, the others read it from L2.
func cleanRound(t *testing.T, pods []*Pipeline[string], key string, load LoadFunc[string]) {
	t.Helper()
	if err := tryCleanRound(pods, key, load); err != nil {
		t.Fatal(err)
	}
}

func tryCleanRound(pods []*Pipeline[string], key string, load LoadFunc[string]) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := pods[0].GetResult(ctx, key, load)
	if err != nil || r.FailedOpen || r.Source != SourceLoader {
		return fmt.Errorf("pod 0, %s: %+v, %v; want a locked load", key, r, err)
	}
	for i, p := range pods[1:] {
		r, err := p.GetResult(ctx, key, load)
		if err != nil || r.FailedOpen || r.Source != SourceL2 {
			return fmt.Errorf("pod %d, %s: %+v, %v; want the value from L2", i+1, key, r, err)
		}
	}
	return nil
}

// recoverClean runs rounds on new keys until one is clean, and returns
// when it was; it fails t when none is within recoverWithin.
func recoverClean(t *testing.T, pods []*Pipeline[string], load LoadFunc[string]) time.Time {
	t.Helper()
	deadline := time.Now().Add(recoverWithin)
	var err error
	for i := 0; time.Now().Before(deadline); i++ {
		if err = tryCleanRound(pods, fmt.Sprintf("after-%d", i), load); err == nil {
			return time.Now()
		}
	}
	t.Fatalf("no clean round within %v of the fault's end; last: %v", recoverWithin, err)
	return time.Time{}
}
