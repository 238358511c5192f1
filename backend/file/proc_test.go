//go:build unix

package file

import (
	"context"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
)

// holdInChild starts a child process that takes key's lock and beats
// every heartbeat, and returns it with its grant's fence.
func holdInChild(t *testing.T, dir, ns, key string, heartbeat time.Duration) (*child, int64) {
	t.Helper()
	c := startChild(t, "hold", childConfig{Dir: dir, Namespace: ns, Key: key, Heartbeat: heartbeat, Lease: time.Hour})
	line := c.expect(t, "acquired ", 30*time.Second)
	fence, err := strconv.ParseInt(strings.TrimPrefix(line, "acquired "), 10, 64)
	if err != nil {
		t.Fatal(line, err)
	}
	return c, fence
}

// TestTakeoverOfKilledHolder: the flock of a SIGKILLed holder dies with
// its process, so the lock is taken over at once, not two beats later
// (the holder beats every hour here).
func TestTakeoverOfKilledHolder(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c, fence := holdInChild(t, dir, "kill", "k", time.Hour)
	s := openTest(t, dir, "kill", time.Second)
	if _, err := s.TryAcquire(ctx, "k", time.Minute); !errors.Is(err, backend.ErrNotAcquired) {
		t.Fatalf("TryAcquire while the child holds = %v", err)
	}
	if err := c.Kill(time.Minute); err != nil { // reaped: the kernel has dropped its flocks
		t.Fatal(err)
	}
	if held, _, err := s.Inspect(ctx, "k"); err != nil || held {
		t.Fatalf("Inspect after the holder was killed = %v, %v; want not held", held, err)
	}
	l, err := s.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatalf("TryAcquire after the holder was killed = %v; want an immediate takeover", err)
	}
	defer l.Release(ctx)
	if !l.TookOver() || l.Fence() <= fence {
		t.Fatalf("took over %v, fence %d after the child's %d", l.TookOver(), l.Fence(), fence)
	}
}

// TestTakeoverOfStoppedHolder: a SIGSTOPped holder keeps its flock but
// stops beating; one TryAcquire takes the lock over after two beats, and
// the holder, once continued, finds its lease lost and writes nothing.
func TestTakeoverOfStoppedHolder(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	const beat = 100 * time.Millisecond
	c, fence := holdInChild(t, dir, "stop", "k", beat)
	s := openTest(t, dir, "stop", beat)
	time.Sleep(3 * beat) // it beats: still held
	if _, err := s.TryAcquire(ctx, "k", time.Minute); !errors.Is(err, backend.ErrNotAcquired) {
		t.Fatalf("TryAcquire while the child beats = %v", err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	var l *backend.Lease
	stopped := time.Now()
	for l == nil {
		var err error
		l, err = s.TryAcquire(ctx, "k", time.Minute)
		switch {
		case errors.Is(err, backend.ErrNotAcquired):
			if time.Since(stopped) > time.Minute {
				t.Fatal("a stopped holder was never taken over")
			}
			time.Sleep(beat / 4)
		case err != nil:
			t.Fatal(err)
		}
	}
	if !l.TookOver() || l.Fence() <= fence {
		t.Fatalf("took over %v, fence %d after the child's %d", l.TookOver(), l.Fence(), fence)
	}
	// Only one taker.
	if _, err := s.TryAcquire(ctx, "k", time.Minute); !errors.Is(err, backend.ErrNotAcquired) {
		t.Fatalf("second TryAcquire after the takeover = %v", err)
	}
	l.KeepAlive(ctx, nil)
	if err := c.Cont(); err != nil {
		t.Fatal(err)
	}
	if line := c.expect(t, "lost ", 30*time.Second); line != "lost true" {
		t.Fatalf("the continued holder's write-back: %q, want ErrLockLost", line)
	}
	// The new holder beats on and keeps the lock; once the old holder let
	// its flock go, the new one picks it up at a beat.
	time.Sleep(3 * beat)
	if _, err := s.TryAcquire(ctx, "k", time.Minute); !errors.Is(err, backend.ErrNotAcquired) {
		t.Fatalf("TryAcquire while the new holder beats = %v", err)
	}
	st, err := readState(s.lockDir() + "/" + hashName("k") + ".state")
	if err != nil || st.token != l.Token() || !st.flocked {
		t.Fatalf("state after the old holder left: %+v, %v", st, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestNotifyWakesOtherProcess(t *testing.T) {
	dir := t.TempDir()
	c := startChild(t, "subscribe", childConfig{Dir: dir, Namespace: "wake", Key: "k"})
	c.expect(t, "ready", 30*time.Second)
	s := openTest(t, dir, "wake", time.Second)
	if err := s.Notify(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	c.expect(t, "woke", 30*time.Second)
}

func TestAnnounceReachesOtherProcess(t *testing.T) {
	dir := t.TempDir()
	c := startChild(t, "watch", childConfig{Dir: dir, Namespace: "ann"})
	c.expect(t, "ready", 30*time.Second)
	s := openTest(t, dir, "ann", time.Second)
	key := "user:\x00\xff 42"
	if err := s.Announce(context.Background(), key, "pod-1"); err != nil {
		t.Fatal(err)
	}
	want := "write " + hex.EncodeToString([]byte(key)) + " pod-1"
	if got := c.expect(t, "write ", 30*time.Second); got != want {
		t.Fatalf("child heard %q, want %q", got, want)
	}
}
