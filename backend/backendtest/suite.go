package backendtest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
)

// Run checks the contract of [backend.Shared] on the views open
// returns. open opens a view of the backend under test for scope s; views
// opened with the same namespace must share their keys, locks and
// announcements, as the views of different processes do. Run closes each
// view it opens. Each check uses namespaces of its own, so a persistent backend
// may run it against one database or directory, repeatedly.
func Run(t *testing.T, open func(t *testing.T, s backend.Scope) backend.Shared) {
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
		{"LoadMany", s.loadMany},
		{"TryAcquireMany", s.tryAcquireMany},
	} {
		t.Run(c.name, c.run)
	}
}

type suite struct {
	open func(t *testing.T, s backend.Scope) backend.Shared
}

var nsSeq atomic.Int64

// views opens n views of one fresh namespace, beating every heartbeat.
func (s suite) views(t *testing.T, n int, heartbeat time.Duration) []backend.Shared {
	t.Helper()
	ns := "backendtest-" + newToken()[:12] + "-" + time.Now().Format("150405") + "-" + string(rune('a'+nsSeq.Add(1)%26))
	return s.viewsOf(t, ns, n, heartbeat)
}

func (s suite) viewsOf(t *testing.T, ns string, n int, heartbeat time.Duration) []backend.Shared {
	t.Helper()
	out := make([]backend.Shared, n)
	for i := range out {
		v := s.open(t, backend.Scope{Namespace: ns, Heartbeat: heartbeat})
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

func acquire(t *testing.T, ctx context.Context, v backend.Shared, key string, ttl time.Duration) *backend.Lease {
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

func save(t *testing.T, ctx context.Context, v backend.Shared, key string, raw []byte, s backend.Save) bool {
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

func load(t *testing.T, ctx context.Context, v backend.Shared, key string) []byte {
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
		if _, err := v.TryAcquire(ctx, "k", 10*time.Second); !errors.Is(err, backend.ErrNotAcquired) {
			t.Fatalf("view %d: TryAcquire of a held key: %v, want backend.ErrNotAcquired", i, err)
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
	if err := old.Extend(ctx, time.Second); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("Extend with a replaced token: %v, want backend.ErrNotHeld", err)
	}
	if err := old.Release(ctx); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("Release with a replaced token: %v, want backend.ErrNotHeld", err)
	}
	if _, err := vs[0].TryAcquire(ctx, "k", 10*time.Second); !errors.Is(err, backend.ErrNotAcquired) {
		t.Fatalf("TryAcquire after a stale token's Release: %v, want backend.ErrNotAcquired", err)
	}
	if err := cur.Extend(ctx, 10*time.Second); err != nil {
		t.Fatalf("Extend of the current holder: %v", err)
	}
	if err := cur.Release(ctx); err != nil {
		t.Fatalf("Release of the current holder: %v", err)
	}
	if err := cur.Extend(ctx, time.Second); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("Extend after Release: %v, want backend.ErrNotHeld", err)
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
	save(t, ctx, vs[0], "k", []byte("v"), backend.Save{Fence: f})
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
	var l *backend.Lease
	for l == nil {
		var err error
		l, err = vs[1].TryAcquire(ctx, "k", 30*time.Second)
		switch {
		case err == nil:
		case !errors.Is(err, backend.ErrNotAcquired):
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
	if err := dead.Extend(ctx, 30*time.Second); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("the dead holder's Extend: %v, want backend.ErrNotHeld", err)
	}
	if _, err := vs[0].Save(ctx, "k", []byte("late"), backend.Save{Fence: dead.Fence(), Token: dead.Token(), Until: time.Now().Add(time.Minute)}); !errors.Is(err, backend.ErrLockLost) {
		t.Fatalf("the dead holder's Save: %v, want backend.ErrLockLost", err)
	}
	if _, err := vs[0].TryAcquire(ctx, "k", 30*time.Second); !errors.Is(err, backend.ErrNotAcquired) {
		t.Fatalf("TryAcquire right after a takeover: %v, want backend.ErrNotAcquired", err)
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
		if _, err := vs[1].TryAcquire(ctx, "k", 30*time.Second); !errors.Is(err, backend.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a beating holder's lock: %v, want backend.ErrNotAcquired", err)
		}
	}
}
