package backendtest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/lock"
	"github.com/herdguard/herdguard/resilience"
)

// Run checks the contract of [resilience.Shared] on the views open
// returns. open opens a view of the backend under test for scope s; views
// opened with the same namespace must share their keys, locks and
// announcements, as the views of different processes do. Run closes each
// view it opens. Each check uses namespaces of its own, so a persistent backend
// may run it against one database or directory, repeatedly.
func Run(t *testing.T, open func(t *testing.T, s resilience.BackendScope) resilience.Shared) {
	t.Helper()
	s := suite{open: open}
	for _, c := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"ExclusiveTryAcquire", s.exclusive},
		{"ReleaseExtendCheckToken", s.tokens},
		{"FencesIncrease", s.fences},
		{"TakeoverOfSilentHolder", s.takeover},
		{"NoTakeoverOfBeatingHolder", s.noTakeover},
		{"SaveFenceRules", s.saveFences},
		{"SaveRevokedToken", s.saveRevoked},
		{"SaveReleaseWakes", s.saveRelease},
		{"NotifyWakesOtherView", s.notify},
		{"AnnounceReachesWatch", s.announce},
		{"NamespacesIsolated", s.isolated},
		{"LoadAfterUntil", s.until},
		{"ConcurrentTryAcquire", s.concurrent},
	} {
		t.Run(c.name, c.run)
	}
}

type suite struct {
	open func(t *testing.T, s resilience.BackendScope) resilience.Shared
}

var nsSeq atomic.Int64

// views opens n views of one fresh namespace, beating every heartbeat.
func (s suite) views(t *testing.T, n int, heartbeat time.Duration) []resilience.Shared {
	t.Helper()
	ns := "backendtest-" + newToken()[:12] + "-" + time.Now().Format("150405") + "-" + string(rune('a'+nsSeq.Add(1)%26))
	return s.viewsOf(t, ns, n, heartbeat)
}

func (s suite) viewsOf(t *testing.T, ns string, n int, heartbeat time.Duration) []resilience.Shared {
	t.Helper()
	out := make([]resilience.Shared, n)
	for i := range out {
		v := s.open(t, resilience.BackendScope{Namespace: ns, Heartbeat: heartbeat})
		if v == nil {
			t.Fatal("open returned nil")
		}
		t.Cleanup(func() {
			if err := v.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		out[i] = v
	}
	return out
}

func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func acquire(t *testing.T, ctx context.Context, v resilience.Shared, key string, ttl time.Duration) *lock.Lease {
	t.Helper()
	l, err := v.TryAcquire(ctx, key, ttl)
	if err != nil {
		t.Fatalf("TryAcquire(%q): %v", key, err)
	}
	if l == nil || l.Token() == "" || l.Fence() <= 0 || l.Key() != key {
		t.Fatalf("TryAcquire(%q) granted a bad lease: %+v", key, l)
	}
	return l
}

func save(t *testing.T, ctx context.Context, v resilience.Shared, key string, raw []byte, s cache.Save) bool {
	t.Helper()
	if s.Until.IsZero() {
		s.Until = time.Now().Add(time.Minute)
	}
	ok, err := v.Save(ctx, key, raw, s)
	if err != nil {
		t.Fatalf("Save(%q, %+v): %v", key, s, err)
	}
	return ok
}

func load(t *testing.T, ctx context.Context, v resilience.Shared, key string) []byte {
	t.Helper()
	b, err := v.Load(ctx, key)
	if err != nil {
		t.Fatalf("Load(%q): %v", key, err)
	}
	return b
}

func woken(ch <-chan struct{}, within time.Duration) bool {
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

func (s suite) exclusive(t *testing.T) {
	ctx := ctxOf(t)
	vs := s.views(t, 2, time.Second)
	l := acquire(t, ctx, vs[0], "k", 10*time.Second)
	for i, v := range vs {
		if _, err := v.TryAcquire(ctx, "k", 10*time.Second); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("view %d: TryAcquire of a held key: %v, want lock.ErrNotAcquired", i, err)
		}
	}
	if held, left, err := vs[1].Inspect(ctx, "k"); err != nil || !held || left <= 0 {
		t.Fatalf("Inspect of a held key: %v %v %v", held, left, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	acquire(t, ctx, vs[1], "k", 10*time.Second)
}

func (s suite) tokens(t *testing.T) {
	ctx := ctxOf(t)
	vs := s.views(t, 2, time.Second)
	old := acquire(t, ctx, vs[0], "k", 10*time.Second)
	if err := old.Extend(ctx, 10*time.Second); err != nil {
		t.Fatalf("Extend of the holder: %v", err)
	}
	// Revoked, then granted to another holder: the old token holds
	// nothing, and its Release and Extend leave the new grant alone.
	if _, err := vs[1].NextFence(ctx, "k", true); err != nil {
		t.Fatal(err)
	}
	cur := acquire(t, ctx, vs[1], "k", 10*time.Second)
	if err := old.Extend(ctx, time.Second); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Extend with a replaced token: %v, want lock.ErrNotHeld", err)
	}
	if err := old.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Release with a replaced token: %v, want lock.ErrNotHeld", err)
	}
	if _, err := vs[0].TryAcquire(ctx, "k", 10*time.Second); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire after a stale token's Release: %v, want lock.ErrNotAcquired", err)
	}
	if err := cur.Extend(ctx, 10*time.Second); err != nil {
		t.Fatalf("Extend of the current holder: %v", err)
	}
	if err := cur.Release(ctx); err != nil {
		t.Fatalf("Release of the current holder: %v", err)
	}
	if err := cur.Extend(ctx, time.Second); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Extend after Release: %v, want lock.ErrNotHeld", err)
	}
	acquire(t, ctx, vs[0], "k", 10*time.Second)
}

func (s suite) fences(t *testing.T) {
	ctx := ctxOf(t)
	vs := s.views(t, 2, time.Second)
	var last int64
	up := func(what string, f int64) {
		t.Helper()
		if f <= last {
			t.Fatalf("%s: fence %d, not above %d", what, f, last)
		}
		last = f
	}
	for i := range 3 {
		v := vs[i%2]
		l := acquire(t, ctx, v, "k", 10*time.Second)
		up("TryAcquire", l.Fence())
		f, err := v.NextFence(ctx, "k", false)
		if err != nil {
			t.Fatal(err)
		}
		up("NextFence", f)
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release after NextFence without revoke: %v", err)
		}
		f, err = vs[1-i%2].NextFence(ctx, "k", false)
		if err != nil {
			t.Fatal(err)
		}
		up("NextFence", f)
	}
	// A write at a fence counts too.
	f, err := vs[0].NextFence(ctx, "k", false)
	if err != nil {
		t.Fatal(err)
	}
	up("NextFence", f)
	save(t, ctx, vs[0], "k", []byte("v"), cache.Save{Fence: f})
	up("TryAcquire after a write", acquire(t, ctx, vs[1], "k", 10*time.Second).Fence())
	// Fences are per key, yet never go down anywhere.
	other := acquire(t, ctx, vs[0], "other", 10*time.Second)
	if other.Fence() <= 0 {
		t.Fatalf("fence %d", other.Fence())
	}
}

func (s suite) takeover(t *testing.T) {
	ctx := ctxOf(t)
	// A beat long enough that a loaded machine (a race build beside busy
	// processes) does not stall the watchdog for two of them, which would
	// rightly hand the lock over.
	const beat = 500 * time.Millisecond
	vs := s.views(t, 2, beat)
	dead := acquire(t, ctx, vs[0], "k", 30*time.Second)
	if dead.TookOver() {
		t.Fatal("a grant of a free lock says TookOver")
	}
	// It never beats: two beats later, one TryAcquire takes it over.
	deadline := time.Now().Add(20 * beat)
	var l *lock.Lease
	for l == nil {
		var err error
		l, err = vs[1].TryAcquire(ctx, "k", 30*time.Second)
		switch {
		case err == nil:
		case !errors.Is(err, lock.ErrNotAcquired):
			t.Fatal(err)
		case time.Now().After(deadline):
			t.Fatalf("a holder silent for %v was not taken over", 20*beat)
		default:
			time.Sleep(beat / 5)
		}
	}
	if !l.TookOver() {
		t.Fatal("the takeover's lease does not say TookOver")
	}
	if l.Fence() <= dead.Fence() {
		t.Fatalf("takeover fence %d not above %d", l.Fence(), dead.Fence())
	}
	if err := dead.Extend(ctx, 30*time.Second); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("the dead holder's Extend: %v, want lock.ErrNotHeld", err)
	}
	if _, err := vs[0].Save(ctx, "k", []byte("late"), cache.Save{Fence: dead.Fence(), Token: dead.Token(), Until: time.Now().Add(time.Minute)}); !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("the dead holder's Save: %v, want cache.ErrLockLost", err)
	}
	if _, err := vs[0].TryAcquire(ctx, "k", 30*time.Second); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire right after a takeover: %v, want lock.ErrNotAcquired", err)
	}
}

func (s suite) noTakeover(t *testing.T) {
	ctx := ctxOf(t)
	// A beat long enough that a loaded machine (a race build beside busy
	// processes) does not stall the watchdog for two of them, which would
	// rightly hand the lock over.
	const beat = 500 * time.Millisecond
	vs := s.views(t, 2, beat)
	l := acquire(t, ctx, vs[0], "k", 30*time.Second)
	kctx, stop := context.WithCancel(ctx)
	defer stop()
	l.KeepAlive(kctx, nil)
	defer func() { _ = l.Release(ctx) }()
	for end := time.Now().Add(6 * beat); time.Now().Before(end); time.Sleep(beat / 5) {
		if _, err := vs[1].TryAcquire(ctx, "k", 30*time.Second); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a beating holder's lock: %v, want lock.ErrNotAcquired", err)
		}
	}
}

func (s suite) saveFences(t *testing.T) {
	ctx := ctxOf(t)
	vs := s.views(t, 2, time.Second)
	// Unfenced writes replace each other.
	if !save(t, ctx, vs[0], "k", []byte("a"), cache.Save{}) || !save(t, ctx, vs[1], "k", []byte("b"), cache.Save{}) {
		t.Fatal("an unfenced write over an unfenced one was refused")
	}
	if got := string(load(t, ctx, vs[0], "k")); got != "b" {
		t.Fatalf("Load = %q, want b", got)
	}
	f1, _ := vs[0].NextFence(ctx, "k", false)
	f2, err := vs[1].NextFence(ctx, "k", false)
	if err != nil {
		t.Fatal(err)
	}
	if !save(t, ctx, vs[0], "k", []byte("f2"), cache.Save{Fence: f2}) {
		t.Fatal("a fenced write over an unfenced one was refused")
	}
	if save(t, ctx, vs[1], "k", []byte("f1"), cache.Save{Fence: f1}) {
		t.Fatal("a write below the stored fence went through")
	}
	if save(t, ctx, vs[1], "k", []byte("zero"), cache.Save{}) {
		t.Fatal("an unfenced write over a fenced one went through")
	}
	if got := string(load(t, ctx, vs[1], "k")); got != "f2" {
		t.Fatalf("Load = %q, want f2", got)
	}
	f3, _ := vs[1].NextFence(ctx, "k", false)
	if !save(t, ctx, vs[1], "k", []byte("f3"), cache.Save{Fence: f3}) {
		t.Fatal("a write above the stored fence was refused")
	}
	if got := string(load(t, ctx, vs[0], "k")); got != "f3" {
		t.Fatalf("Load = %q, want f3", got)
	}
	if b := load(t, ctx, vs[0], "never-written"); b != nil {
		t.Fatalf("Load of a missing key = %q, want nil", b)
	}
}

func (s suite) saveRevoked(t *testing.T) {
	ctx := ctxOf(t)
	vs := s.views(t, 2, time.Second)
	l := acquire(t, ctx, vs[0], "k", 30*time.Second)
	if _, err := vs[1].NextFence(ctx, "k", true); err != nil {
		t.Fatal(err)
	}
	_, err := vs[0].Save(ctx, "k", []byte("v"), cache.Save{Fence: l.Fence(), Token: l.Token(), Release: true, Until: time.Now().Add(time.Minute)})
	if !errors.Is(err, cache.ErrLockLost) {
		t.Fatalf("Save under a revoked grant: %v, want cache.ErrLockLost", err)
	}
	if b := load(t, ctx, vs[1], "k"); b != nil {
		t.Fatalf("Save under a revoked grant wrote %q", b)
	}
	if err := l.Extend(ctx, 30*time.Second); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Extend of a revoked grant: %v, want lock.ErrNotHeld", err)
	}
	acquire(t, ctx, vs[1], "k", 30*time.Second)
}

func (s suite) saveRelease(t *testing.T) {
	ctx := ctxOf(t)
	vs := s.views(t, 2, time.Second)
	ch, unsubscribe := vs[1].Subscribe("k")
	defer unsubscribe()
	l := acquire(t, ctx, vs[0], "k", 30*time.Second)
	if !save(t, ctx, vs[0], "k", []byte("v"), cache.Save{Fence: l.Fence(), Token: l.Token(), Release: true}) {
		t.Fatal("the holder's write was refused")
	}
	if !woken(ch, 5*time.Second) {
		t.Fatal("Save with Release did not wake a subscriber of another view")
	}
	if got := string(load(t, ctx, vs[1], "k")); got != "v" {
		t.Fatalf("Load = %q, want v", got)
	}
	if err := l.Extend(ctx, time.Second); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Extend after Save with Release: %v, want lock.ErrNotHeld", err)
	}
	l2 := acquire(t, ctx, vs[1], "k", 30*time.Second)
	// A refused write with Release releases too.
	if save(t, ctx, vs[1], "k", []byte("old"), cache.Save{Fence: l.Fence() - 1, Token: l2.Token(), Release: true}) {
		t.Fatal("a write below the stored fence went through")
	}
	acquire(t, ctx, vs[0], "k", 30*time.Second)
}

func (s suite) notify(t *testing.T) {
	ctx := ctxOf(t)
	vs := s.views(t, 2, time.Second)
	ch, unsubscribe := vs[1].Subscribe("k")
	other, unsubscribeOther := vs[1].Subscribe("other")
	defer unsubscribeOther()
	if err := vs[0].Notify(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if !woken(ch, 5*time.Second) {
		t.Fatal("Notify did not wake a subscriber of another view")
	}
	if woken(other, 50*time.Millisecond) {
		t.Fatal("Notify of one key woke another's subscriber")
	}
	unsubscribe()
	if err := vs[0].Notify(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if woken(ch, 100*time.Millisecond) {
		t.Fatal("an ended subscription was woken")
	}
}

func (s suite) announce(t *testing.T) {
	ctx := ctxOf(t)
	vs := s.views(t, 2, time.Second)
	type heard struct{ key, origin string }
	got := make(chan heard, 16)
	stop := vs[1].Watch(func(key, origin string) { got <- heard{key, origin} }, func() {})
	defer stop()
	// A watch may take a moment to be established: announce until heard.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err := vs[0].Announce(ctx, "k", "origin-1"); err != nil {
			t.Fatal(err)
		}
		select {
		case h := <-got:
			if h != (heard{"k", "origin-1"}) {
				t.Fatalf("Watch heard %+v, want k from origin-1", h)
			}
			return
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("Announce did not reach the Watch of another view")
		}
	}
}

func (s suite) isolated(t *testing.T) {
	ctx := ctxOf(t)
	a := s.views(t, 1, time.Second)[0]
	b := s.views(t, 1, time.Second)[0]
	acquire(t, ctx, a, "k", 30*time.Second)
	acquire(t, ctx, b, "k", 30*time.Second)
	save(t, ctx, a, "v", []byte("a"), cache.Save{})
	if got := load(t, ctx, b, "v"); got != nil {
		t.Fatalf("another namespace's value leaked: %q", got)
	}
	ch, unsubscribe := b.Subscribe("k")
	defer unsubscribe()
	heard := make(chan string, 4)
	stop := b.Watch(func(key, _ string) { heard <- key }, func() {})
	defer stop()
	if err := a.Notify(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := a.Announce(ctx, "k", "origin-1"); err != nil {
		t.Fatal(err)
	}
	if woken(ch, 200*time.Millisecond) {
		t.Fatal("a Notify woke another namespace's subscriber")
	}
	select {
	case k := <-heard:
		t.Fatalf("an announcement of %q reached another namespace", k)
	default:
	}
}

func (s suite) until(t *testing.T) {
	ctx := ctxOf(t)
	v := s.views(t, 1, time.Second)[0]
	save(t, ctx, v, "k", []byte("v"), cache.Save{Until: time.Now().Add(300 * time.Millisecond)})
	if got := string(load(t, ctx, v, "k")); got != "v" {
		t.Fatalf("Load before Until = %q", got)
	}
	time.Sleep(400 * time.Millisecond)
	if got := load(t, ctx, v, "k"); got != nil {
		t.Fatalf("Load after Until = %q, want nil", got)
	}
	// A value past its Until refuses no write.
	save(t, ctx, v, "f", []byte("fenced"), cache.Save{Fence: 1 << 40, Until: time.Now().Add(200 * time.Millisecond)})
	time.Sleep(300 * time.Millisecond)
	if !save(t, ctx, v, "f", []byte("new"), cache.Save{}) {
		t.Fatal("a write over an entry past its Until was refused")
	}
}

func (s suite) concurrent(t *testing.T) {
	ctx := ctxOf(t)
	vs := s.views(t, 4, time.Second)
	var wins, lost atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 32 {
		wg.Go(func() {
			<-start
			_, err := vs[i%len(vs)].TryAcquire(ctx, "k", 30*time.Second)
			switch {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, lock.ErrNotAcquired):
				lost.Add(1)
			default:
				t.Errorf("TryAcquire: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if wins.Load() != 1 || lost.Load() != 31 {
		t.Fatalf("%d winners and %d losers of 32, want 1 and 31", wins.Load(), lost.Load())
	}
}
