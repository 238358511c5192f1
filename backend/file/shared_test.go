//go:build unix

package file

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
)

// openTest opens namespace ns of a backend in dir (a fresh one when dir is
// empty), closed at the test's end.
func openTest(t *testing.T, dir, ns string, heartbeat time.Duration) *Shared {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	b, err := New(dir, Options{Sweep: -1})
	if err != nil {
		t.Fatal(err)
	}
	s, err := b.open(backend.Scope{Namespace: ns, Heartbeat: heartbeat})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestNewRefusesEmptyDir(t *testing.T) {
	if _, err := New("", Options{}); err == nil {
		t.Fatal("New(\"\") did not fail")
	}
	dir := filepath.Join(t.TempDir(), "a", "b")
	b, err := New(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b.System() != "file" {
		t.Fatalf("System() = %q", b.System())
	}
	s, err := b.Open(backend.Scope{Namespace: "perm"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Save(context.Background(), "k", []byte("v"), backend.Save{}); err != nil {
		t.Fatal(err)
	}
	err = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		want := os.FileMode(fileMode)
		if info.IsDir() {
			want = dirMode
		}
		if info.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", p, info.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestExclusiveAndTokenChecked(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a := openTest(t, dir, "ex", time.Second)
	b := openTest(t, dir, "ex", time.Second) // a second view in this process
	l1, err := a.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Shared{a, b} {
		if _, err := s.TryAcquire(ctx, "k", time.Minute); !errors.Is(err, backend.ErrNotAcquired) {
			t.Fatalf("second TryAcquire = %v, want ErrNotAcquired", err)
		}
	}
	if held, rem, err := b.Inspect(ctx, "k"); err != nil || !held || rem <= 0 {
		t.Fatalf("Inspect = %v, %v, %v", held, rem, err)
	}
	if err := b.Release(ctx, "k", "not-the-token"); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("Release(wrong token) = %v", err)
	}
	if err := b.Extend(ctx, "k", "not-the-token", time.Minute); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("Extend(wrong token) = %v", err)
	}
	if err := l1.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := b.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	if l2.TookOver() || l2.Fence() <= l1.Fence() {
		t.Fatalf("second grant: took over %v, fence %d after %d", l2.TookOver(), l2.Fence(), l1.Fence())
	}
	if err := a.Extend(ctx, "k", l1.Token(), time.Minute); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("Extend(released token) = %v", err)
	}
}

// TestFlockSurvivesOtherDescriptor checks what the lock relies on: closing
// another descriptor of the lock file, in the holder's process, leaves the
// holder's flock in place (an fcntl lock would be gone).
func TestFlockSurvivesOtherDescriptor(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "", "fd", time.Hour)
	l, err := s.TryAcquire(ctx, "k", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	path := filepath.Join(s.lockDir(), hashName("k")+".lock")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := tryFlock(f); err != nil || ok {
		t.Fatalf("flock of a held lock file = %v, %v", ok, err)
	}
	_ = f.Close()
	g, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if ok, err := tryFlock(g); err != nil || ok {
		t.Fatalf("flock after closing another descriptor = %v, %v; the holder's flock was dropped", ok, err)
	}
	// The state, not only the flock, keeps the lock: a grant whose flock
	// is free counts as dead only because the flock is free.
	if _, err := s.TryAcquire(ctx, "k", time.Hour); !errors.Is(err, backend.ErrNotAcquired) {
		t.Fatalf("TryAcquire = %v, want ErrNotAcquired", err)
	}
}

func TestFencesIncrease(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir, "fence", time.Second)
	var last int64
	next := func(f int64, what string) {
		t.Helper()
		if f <= last {
			t.Fatalf("%s: fence %d after %d", what, f, last)
		}
		last = f
	}
	for range 3 {
		f, err := s.NextFence(ctx, "k", false)
		if err != nil {
			t.Fatal(err)
		}
		next(f, "NextFence")
		l, err := s.TryAcquire(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		next(l.Fence(), "TryAcquire")
		if _, err := s.Save(ctx, "k", []byte("v"), backend.Save{Fence: l.Fence(), Token: l.Token(), Release: true}); err != nil {
			t.Fatal(err)
		}
		l.Forget()
	}
	// A counter far ahead of the clock (a clock that stepped back) keeps
	// fences growing; so does the clock once the directory is gone.
	if err := os.WriteFile(filepath.Join(s.root, "fence"), []byte("8000000000000000\n"), fileMode); err != nil {
		t.Fatal(err)
	}
	f, err := s.NextFence(ctx, "other", false)
	if err != nil {
		t.Fatal(err)
	}
	if f != 8000000000000001 {
		t.Fatalf("fence after counter 8e15 = %d", f)
	}
	removeDir(t, dir)
	f, err = s.NextFence(ctx, "k", false)
	if err != nil {
		t.Fatal(err)
	}
	next(f, "NextFence after the directory was removed")
}

func TestSaveFenceRules(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "", "save", time.Second)
	until := time.Now().Add(time.Minute)
	save := func(v string, w backend.Save) (bool, error) {
		w.Until = until
		return s.Save(ctx, "k", []byte(v), w)
	}
	load := func() string {
		b, err := s.Load(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if ok, err := save("unlocked", backend.Save{}); !ok || err != nil {
		t.Fatalf("Save(fence 0) on nothing = %v, %v", ok, err)
	}
	if ok, err := save("f10", backend.Save{Fence: 10}); !ok || err != nil {
		t.Fatalf("Save(fence 10) = %v, %v", ok, err)
	}
	if ok, err := save("f5", backend.Save{Fence: 5}); ok || err != nil {
		t.Fatalf("Save(fence 5) over 10 = %v, %v", ok, err)
	}
	if ok, err := save("f0", backend.Save{}); ok || err != nil {
		t.Fatalf("Save(fence 0) over 10 = %v, %v", ok, err)
	}
	if got := load(); got != "f10" {
		t.Fatalf("Load = %q, want f10", got)
	}
	l, err := s.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if l.Fence() <= 10 {
		t.Fatalf("grant fence %d not above the stored 10", l.Fence())
	}
	f, err := s.NextFence(ctx, "k", true) // an Invalidate: revokes the grant
	if err != nil {
		t.Fatal(err)
	}
	if f <= l.Fence() {
		t.Fatalf("NextFence %d not above the grant's %d", f, l.Fence())
	}
	if ok, err := save("late", backend.Save{Fence: l.Fence(), Token: l.Token(), Release: true}); ok || !errors.Is(err, backend.ErrLockLost) {
		t.Fatalf("Save with a revoked token = %v, %v; want ErrLockLost", ok, err)
	}
	if err := l.Extend(ctx, time.Minute); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("Extend of a revoked grant = %v", err)
	}
	if got := load(); got != "f10" {
		t.Fatalf("Load = %q after a lost write", got)
	}
	// A grant's write that a newer write beat is refused, and still
	// releases the lock.
	l2, err := s.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	nf, err := s.NextFence(ctx, "k", false)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := save("newer", backend.Save{Fence: nf}); !ok || err != nil {
		t.Fatalf("Save(NextFence) = %v, %v", ok, err)
	}
	if ok, err := save("older", backend.Save{Fence: l2.Fence(), Token: l2.Token(), Release: true}); ok || err != nil {
		t.Fatalf("Save below the stored fence = %v, %v", ok, err)
	}
	l2.Forget()
	if held, _, _ := s.Inspect(ctx, "k"); held {
		t.Fatal("lock still held after Save with Release")
	}
	if got := load(); got != "newer" {
		t.Fatalf("Load = %q, want newer", got)
	}
	// Past its until, a value is gone.
	if ok, err := s.Save(ctx, "short", []byte("x"), backend.Save{Until: time.Now().Add(20 * time.Millisecond)}); !ok || err != nil {
		t.Fatal(ok, err)
	}
	time.Sleep(30 * time.Millisecond)
	if b, err := s.Load(ctx, "short"); b != nil || err != nil {
		t.Fatalf("Load of an expired value = %q, %v", b, err)
	}
}

// TestKeysAnyBytesAndCollisions: keys are hashed to file names and checked
// on read.
func TestKeysAnyBytesAndCollisions(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "", "keys", time.Second)
	keys := []string{"", "/", "../../etc/passwd", "a\x00b", strings.Repeat("x", 5000), "ключ"}
	for i, k := range keys {
		if _, err := s.Save(ctx, k, []byte{byte(i)}, backend.Save{}); err != nil {
			t.Fatalf("Save(%q): %v", k, err)
		}
	}
	for i, k := range keys {
		b, err := s.Load(ctx, k)
		if err != nil || !bytes.Equal(b, []byte{byte(i)}) {
			t.Fatalf("Load(%q) = %v, %v", k, b, err)
		}
	}
	// A file that holds another key (as a hash collision would) is no
	// value of this one.
	src := filepath.Join(s.valueDir(), hashName("/"))
	dst := filepath.Join(s.valueDir(), hashName("other"))
	if err := os.Link(src, dst); err != nil {
		t.Fatal(err)
	}
	if b, err := s.Load(ctx, "other"); b != nil || err != nil {
		t.Fatalf("Load of a colliding file = %q, %v", b, err)
	}
}

func TestNotifyAndAnnounceInProcess(t *testing.T) {
	for _, poll := range []bool{false, true} {
		name := "inotify"
		if poll {
			name = "poll"
		}
		t.Run(name, func(t *testing.T) {
			forcePoll = poll
			defer func() { forcePoll = false }()
			ctx := context.Background()
			dir := t.TempDir()
			a := openTest(t, dir, "wake", time.Second)
			b := openTest(t, dir, "wake", time.Second)
			ch, stop := a.Subscribe("k")
			defer stop()
			writes := make(chan [2]string, 4)
			stopW := a.Watch(func(k, o string) { writes <- [2]string{k, o} }, func() {})
			defer stopW()
			// The poller takes its first look on its own goroutine: what
			// is there then is old. Repeat until heard.
			deadline := time.After(10 * time.Second)
		notify:
			for {
				if err := b.Notify(ctx, "k"); err != nil {
					t.Fatal(err)
				}
				select {
				case <-ch:
					break notify
				case <-time.After(DefaultPoll * 2):
				case <-deadline:
					t.Fatal("Subscribe not woken by Notify")
				}
			}
			for {
				if err := b.Announce(ctx, "k\x00y", "pod-b"); err != nil {
					t.Fatal(err)
				}
				select {
				case w := <-writes:
					if w != [2]string{"k\x00y", "pod-b"} {
						t.Fatalf("announcement = %q", w)
					}
					return
				case <-time.After(DefaultPoll * 2):
				case <-deadline:
					t.Fatal("Watch did not hear Announce")
				}
			}
		})
	}
}

// TestDirectoryRemoved: after the directory is removed, operations work
// again, holders of vanished grants learn that they lost them, and
// watchers hear a reset.
func TestDirectoryRemoved(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir, "gone", time.Second)
	var resets atomic.Int32
	stop := s.Watch(func(string, string) {}, func() { resets.Add(1) })
	defer stop()
	ch, unsub := s.Subscribe("k")
	defer unsub()
	l, err := s.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	removeDir(t, dir)
	if _, err := s.Save(ctx, "k", []byte("v"), backend.Save{Fence: l.Fence(), Token: l.Token()}); !errors.Is(err, backend.ErrLockLost) {
		t.Fatalf("Save of a vanished grant = %v, want ErrLockLost", err)
	}
	l.Forget()
	l2, err := s.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatalf("TryAcquire after removal: %v", err)
	}
	if ok, err := s.Save(ctx, "k", []byte("v2"), backend.Save{Fence: l2.Fence(), Token: l2.Token(), Release: true}); !ok || err != nil {
		t.Fatalf("Save after removal = %v, %v", ok, err)
	}
	l2.Forget()
	if b, err := s.Load(ctx, "k"); string(b) != "v2" || err != nil {
		t.Fatalf("Load = %q, %v", b, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for resets.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if resets.Load() == 0 {
		t.Fatal("no reset after the directory was removed")
	}
	// The watch is back: a note wakes the subscriber.
	for len(ch) > 0 {
		<-ch
	}
	if err := s.Notify(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("not woken after the watch was set up again")
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestSweep(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "", "sweep", time.Second)
	if _, err := s.Save(ctx, "old", []byte("x"), backend.Save{Until: time.Now().Add(10 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(ctx, "kept", []byte("x"), backend.Save{Until: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	l, err := s.TryAcquire(ctx, "free", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	held, err := s.TryAcquire(ctx, "held", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	time.Sleep(20 * time.Millisecond)
	s.sweep(time.Millisecond)
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	if exists(filepath.Join(s.valueDir(), hashName("old"))) || !exists(filepath.Join(s.valueDir(), hashName("kept"))) {
		t.Fatal("sweep did not remove just the expired value")
	}
	if exists(filepath.Join(s.lockDir(), hashName("free")+".state")) || !exists(filepath.Join(s.lockDir(), hashName("held")+".lock")) {
		t.Fatal("sweep did not remove just the free lock's files")
	}
	if _, err := s.TryAcquire(ctx, "held", time.Minute); !errors.Is(err, backend.ErrNotAcquired) {
		t.Fatalf("held lock after sweep: %v", err)
	}
}

// removeDir removes dir while processes may be writing into it: it is
// renamed away first (processes then see it gone at once) and removed.
func removeDir(t *testing.T, dir string) {
	t.Helper()
	gone := dir + ".gone-" + randHex(4)
	if err := os.Rename(dir, gone); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if err := os.RemoveAll(gone); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("could not remove %s", gone)
}

// TestSweepKeepsFlockedLockFile: a lock file whose grant was revoked but
// whose old holder still has its flock is not removed (a holder of a
// removed file would exclude nobody who opens the path afterwards).
func TestSweepKeepsFlockedLockFile(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, "", "sweepflock", time.Second)
	l, err := s.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if _, err := s.NextFence(ctx, "k", true); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	s.sweep(time.Millisecond)
	if _, err := os.Stat(filepath.Join(s.lockDir(), hashName("k")+".lock")); err != nil {
		t.Fatalf("lock file of a flocked, revoked grant: %v", err)
	}
}

func TestSystemAndSubscribed(t *testing.T) {
	s := openTest(t, "", "sys", time.Second)
	if s.System() != "file" {
		t.Fatalf("System() = %q", s.System())
	}
	if s.Subscribed() {
		t.Fatal("Subscribed before any Watch")
	}
	stop := s.Watch(func(string, string) {}, func() {})
	defer stop()
	if !s.Subscribed() {
		t.Fatal("not Subscribed once Watch returned")
	}
	_ = s.Close()
	if s.Subscribed() {
		t.Fatal("Subscribed after Close")
	}
}
