package crosspod_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRelease_breakerOpen checks that a holder releases its lock even
// while its Redis breaker is open: release never goes through the breaker.
//
// Pod 0 takes the lock and loads (held). Redis is paused (SIGSTOP) and pod
// 0's calls on other keys time out until its Redis breaker opens; Redis is
// resumed, and pod 0's load finishes while the breaker is still open (it
// stays open 20 s). No lock key may be left after the call; and pod 1, which
// would wait 12 s for a lock left behind, must get the key without that
// stall.
func TestRelease_breakerOpen(t *testing.T) {
	const (
		key         = "k"
		breakerOpen = 20 * time.Second
		stallBound  = 6 * time.Second // well under pod 1's MaxWait
		releaseWait = 2 * time.Second
	)
	srv, admin := startRedis(t)
	holder := podSpec{OpTimeout: 100 * time.Millisecond, BreakerOpen: breakerOpen, LoadTimeout: resultBound}
	waiter := podSpec{Lock: lockConfig{MaxWait: 15 * time.Second}}
	f := startFleet(t, newName("release"), target{Addr: srv.Addr()}, holder, waiter)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f.waitSubscribed(ctx, admin, 2)

	hc := f.get(0, key, 4, held)
	if l, ok := f.waitLoad(key, 0, stepBound); !ok || l.Pod != 0 {
		t.Fatalf("pod 0 did not begin the first load within %v (got %+v)", stepBound, l)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	openAt, ok := tripBreaker(t, f, 0)
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatalf("pod 0's Redis breaker did not open: transitions %v", f.breakers(0))
	}
	f.finish(0, key)
	h := tallyOf(f.results(hc, resultBound))
	returned := time.Now()
	if h.errCount > 0 {
		t.Errorf("holder's callers: %v", h)
	}
	if tr := f.breakers(0); slices.ContainsFunc(tr, func(s string) bool { return strings.HasSuffix(s, ">half-open") }) {
		t.Fatalf("pod 0's breaker left open before its load finished (%v): the test did not test", tr)
	}
	t.Logf("holder's load finished %v after its Redis breaker opened", returned.Sub(openAt).Round(time.Millisecond))

	lockKey := f.keys().Lock(key)
	var n int64
	for end := time.Now().Add(releaseWait); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if n = admin.Exists(ctx, lockKey).Val(); n == 0 {
			break
		}
	}
	if n != 0 {
		pttl := admin.PTTL(ctx, lockKey).Val()
		t.Errorf("lock key still set %v after the holder's call returned (expires in %v): the release was skipped while the Redis breaker was open",
			releaseWait, pttl.Round(time.Millisecond))
	}

	wc := f.get(1, key, 4, sleeping(200*time.Millisecond))
	w := tallyOf(f.results(wc, resultBound))
	took := time.Since(wc.sent)
	t.Logf("FIGURES holder finished with its Redis breaker open: the next pod got the key in %v (%v)", took.Round(time.Millisecond), w.sources)
	if w.errCount > 0 || w.failedOpen > 0 {
		t.Errorf("pod 1's callers: %v", w)
	}
	if took > stallBound {
		t.Errorf("pod 1 took %v to get the key: it waited on a lock the holder left behind", took.Round(time.Millisecond))
	}
}

// tripBreaker makes pod i call fresh keys, ten at a time, while Redis is
// paused, until its Redis breaker opens; it returns when it saw it open.
func tripBreaker(t *testing.T, f *fleet, i int) (time.Time, bool) {
	t.Helper()
	isOpen := func() bool {
		return slices.ContainsFunc(f.breakers(i), func(s string) bool { return strings.HasSuffix(s, ">open") })
	}
	for n := 0; n < 20 && !isOpen(); n++ {
		var calls []call
		for j := range 10 {
			calls = append(calls, f.get(i, fmt.Sprintf("trip-%d-%d", n, j), 1, sleeping(time.Millisecond)))
		}
		for _, c := range calls {
			f.results(c, stepBound)
		}
	}
	return time.Now(), isOpen()
}
