package backendtest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
)

// The checks of the store and of the notifications between views.

func (s suite) saveFences(t *testing.T) {
	ctx := ctxOf(t)
	vs := s.views(t, 2, time.Second)
	// Unfenced writes replace each other.
	if !save(t, ctx, vs[0], "k", []byte("a"), backend.Save{}) || !save(t, ctx, vs[1], "k", []byte("b"), backend.Save{}) {
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
	if !save(t, ctx, vs[0], "k", []byte("f2"), backend.Save{Fence: f2}) {
		t.Fatal("a fenced write over an unfenced one was refused")
	}
	if save(t, ctx, vs[1], "k", []byte("f1"), backend.Save{Fence: f1}) {
		t.Fatal("a write below the stored fence went through")
	}
	if save(t, ctx, vs[1], "k", []byte("zero"), backend.Save{}) {
		t.Fatal("an unfenced write over a fenced one went through")
	}
	if got := string(load(t, ctx, vs[1], "k")); got != "f2" {
		t.Fatalf("Load = %q, want f2", got)
	}
	f3, _ := vs[1].NextFence(ctx, "k", false)
	if !save(t, ctx, vs[1], "k", []byte("f3"), backend.Save{Fence: f3}) {
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
	_, err := vs[0].Save(ctx, "k", []byte("v"), backend.Save{Fence: l.Fence(), Token: l.Token(), Release: true, Until: time.Now().Add(time.Minute)})
	if !errors.Is(err, backend.ErrLockLost) {
		t.Fatalf("Save under a revoked grant: %v, want backend.ErrLockLost", err)
	}
	if b := load(t, ctx, vs[1], "k"); b != nil {
		t.Fatalf("Save under a revoked grant wrote %q", b)
	}
	if err := l.Extend(ctx, 30*time.Second); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("Extend of a revoked grant: %v, want backend.ErrNotHeld", err)
	}
	acquire(t, ctx, vs[1], "k", 30*time.Second)
}

func (s suite) saveRelease(t *testing.T) {
	ctx := ctxOf(t)
	vs := s.views(t, 2, time.Second)
	ch, unsubscribe := vs[1].Subscribe("k")
	defer unsubscribe()
	l := acquire(t, ctx, vs[0], "k", 30*time.Second)
	if !save(t, ctx, vs[0], "k", []byte("v"), backend.Save{Fence: l.Fence(), Token: l.Token(), Release: true}) {
		t.Fatal("the holder's write was refused")
	}
	if !woken(ch, 5*time.Second) {
		t.Fatal("Save with Release did not wake a subscriber of another view")
	}
	if got := string(load(t, ctx, vs[1], "k")); got != "v" {
		t.Fatalf("Load = %q, want v", got)
	}
	if err := l.Extend(ctx, time.Second); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("Extend after Save with Release: %v, want backend.ErrNotHeld", err)
	}
	l2 := acquire(t, ctx, vs[1], "k", 30*time.Second)
	// A refused write with Release releases too.
	if save(t, ctx, vs[1], "k", []byte("old"), backend.Save{Fence: l.Fence() - 1, Token: l2.Token(), Release: true}) {
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
	save(t, ctx, a, "v", []byte("a"), backend.Save{})
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
	save(t, ctx, v, "k", []byte("v"), backend.Save{Until: time.Now().Add(300 * time.Millisecond)})
	if got := string(load(t, ctx, v, "k")); got != "v" {
		t.Fatalf("Load before Until = %q", got)
	}
	time.Sleep(400 * time.Millisecond)
	if got := load(t, ctx, v, "k"); got != nil {
		t.Fatalf("Load after Until = %q, want nil", got)
	}
	// A value past its Until refuses no write.
	save(t, ctx, v, "f", []byte("fenced"), backend.Save{Fence: 1 << 40, Until: time.Now().Add(200 * time.Millisecond)})
	time.Sleep(300 * time.Millisecond)
	if !save(t, ctx, v, "f", []byte("new"), backend.Save{}) {
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
			case errors.Is(err, backend.ErrNotAcquired):
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
