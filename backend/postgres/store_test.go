package postgres

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
)

func TestStore_Save_fenceRule(t *testing.T) {
	f := newFixture(t, Options{})
	s := f.open("ns", 0)
	ctx := testCtx(t)
	until := time.Now().Add(time.Minute)
	steps := []struct {
		name   string
		fence  int64
		data   string
		stored bool
		want   string
	}{
		{"unlocked write on an empty key", 0, "a", true, "a"},
		{"unlocked write over an unlocked one", 0, "b", true, "b"},
		{"fenced write", 10, "c", true, "c"},
		{"unlocked write below a fenced one", 0, "d", false, "c"},
		{"older fence", 9, "e", false, "c"},
		{"same fence", 10, "f", true, "f"},
		{"newer fence", 11, "g", true, "g"},
	}
	for _, st := range steps {
		stored, err := s.Save(ctx, "k", []byte(st.data), backend.Save{Fence: st.fence, Until: until})
		if err != nil || stored != st.stored {
			t.Fatalf("%s: Save = %v, %v; want %v", st.name, stored, err, st.stored)
		}
		got, err := s.Load(ctx, "k")
		if err != nil || string(got) != st.want {
			t.Fatalf("%s: Load = %q, %v; want %q", st.name, got, err, st.want)
		}
	}
	// A value past its Until is gone, and no longer blocks older fences.
	if _, err := s.Save(ctx, "short", []byte("x"), backend.Save{Fence: 100, Until: time.Now().Add(100 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if got, err := s.Load(ctx, "short"); got != nil || err != nil {
		t.Fatalf("Load past Until = %q, %v; want nothing", got, err)
	}
	if stored, err := s.Save(ctx, "short", []byte("y"), backend.Save{Fence: 0, Until: until}); !stored || err != nil {
		t.Fatalf("Save over an expired value = %v, %v", stored, err)
	}
	// An empty value is a value.
	if _, err := s.Save(ctx, "empty", []byte{}, backend.Save{Until: until}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Load(ctx, "empty"); got == nil || len(got) != 0 || err != nil {
		t.Fatalf("Load of an empty value = %#v, %v", got, err)
	}
}

func TestStore_Save_underLock(t *testing.T) {
	f := newFixture(t, Options{})
	a, b := f.open("ns", 0), f.open("ns", 0)
	ctx := testCtx(t)
	until := time.Now().Add(time.Minute)

	l, err := a.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// A token that never held the lock writes nothing.
	if _, err := a.Save(ctx, "k", []byte("x"), backend.Save{Fence: l.Fence(), Token: "nope", Until: until}); !errors.Is(err, backend.ErrLockLost) {
		t.Fatalf("Save with a foreign token = %v, want ErrLockLost", err)
	}
	// A write without Release keeps the lock.
	if stored, err := a.Save(ctx, "k", []byte("v1"), backend.Save{Fence: l.Fence(), Token: l.Token(), Until: until}); !stored || err != nil {
		t.Fatalf("Save under the lock = %v, %v", stored, err)
	}
	if held, _, _ := b.Inspect(ctx, "k"); !held {
		t.Fatal("lock released by a Save without Release")
	}
	// A newer unlocked-path write (Set) lands between: the holder's
	// write-back is refused by the fence rule, and still releases.
	nf, err := b.NextFence(ctx, "k", false)
	if err != nil || nf <= l.Fence() {
		t.Fatalf("NextFence = %d, %v; want above the grant's %d", nf, err, l.Fence())
	}
	if _, err := b.Save(ctx, "k", []byte("set"), backend.Save{Fence: nf, Until: until}); err != nil {
		t.Fatal(err)
	}
	stored, err := a.Save(ctx, "k", []byte("v2"), backend.Save{Fence: l.Fence(), Token: l.Token(), Release: true, Until: until})
	if stored || err != nil {
		t.Fatalf("holder's write-back below a newer write = %v, %v; want refused", stored, err)
	}
	l.Forget()
	if held, _, _ := b.Inspect(ctx, "k"); held {
		t.Fatal("Save with Release left the lock held")
	}
	if got, _ := b.Load(ctx, "k"); string(got) != "set" {
		t.Fatalf("Load = %q, want the newer write", got)
	}
	// The next grant's fence is above the write's.
	l2, err := b.TryAcquire(ctx, "k", time.Minute)
	if err != nil || l2.Fence() <= nf {
		t.Fatalf("next grant = %v (fence above %d?), %v", l2, nf, err)
	}
	_ = l2.Release(ctx)
}

func TestStore_NextFence_revokeEndsTheGrant(t *testing.T) {
	f := newFixture(t, Options{})
	a, b := f.open("ns", 0), f.open("ns", 0)
	ctx := testCtx(t)
	l, err := a.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	wake, unsub := a.Subscribe("k")
	defer unsub()
	waitListening(t, a)

	tomb, err := b.NextFence(ctx, "k", true)
	if err != nil || tomb <= l.Fence() {
		t.Fatalf("NextFence(revoke) = %d, %v; want above %d", tomb, err, l.Fence())
	}
	if _, err := b.Save(ctx, "k", nil, backend.Save{Fence: tomb, Until: time.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("revoking the grant did not wake the key's waiters")
	}
	if _, err := a.Save(ctx, "k", []byte("late"), backend.Save{Fence: l.Fence(), Token: l.Token(), Release: true,
		Until: time.Now().Add(time.Minute)}); !errors.Is(err, backend.ErrLockLost) {
		t.Fatalf("revoked holder's Save = %v, want ErrLockLost", err)
	}
	if err := l.Extend(ctx, time.Minute); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("revoked holder's Extend = %v, want ErrNotHeld", err)
	}
	l.Forget()
	next, err := a.TryAcquire(ctx, "k", time.Minute)
	if err != nil || next.TookOver() || next.Fence() <= tomb {
		t.Fatalf("grant after revoke = %+v, %v; want a free lock above %d", next, err, tomb)
	}
	_ = next.Release(ctx)
	// Without revoke, the holder keeps its lock.
	l3, err := a.TryAcquire(ctx, "j", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.NextFence(ctx, "j", false); err != nil {
		t.Fatal(err)
	}
	if err := l3.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend after NextFence without revoke = %v", err)
	}
	_ = l3.Release(ctx)
}

func TestFence_neverBackwards_whenRowsAreLost(t *testing.T) {
	f := newFixture(t, Options{})
	s := f.open("ns", 0)
	ctx := testCtx(t)
	l1, err := s.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// A counter far ahead of the clock: fences handed out in a burst.
	if _, err := s.Save(ctx, "k", []byte("v"), backend.Save{Fence: l1.Fence(), Token: l1.Token(), Release: true,
		Until: time.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	l1.Forget()
	var last int64
	for range 50 {
		l, err := s.TryAcquire(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= last {
			t.Fatalf("fence %d after %d", l.Fence(), last)
		}
		last = l.Fence()
		_ = l.Release(ctx)
	}
	if _, err := s.b.pool.Exec(ctx, "TRUNCATE "+s.b.q.lockT+", "+s.b.q.valueT); err != nil {
		t.Fatal(err)
	}
	l2, err := s.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if l2.Fence() <= last {
		t.Fatalf("fence after the tables were emptied: %d <= %d", l2.Fence(), last)
	}
	_ = l2.Release(ctx)
}

func TestStore_longAndBinaryKeys(t *testing.T) {
	f := newFixture(t, Options{})
	a, b := f.open("ns", 0), f.open("ns", 0)
	ctx := testCtx(t)
	long := strings.Repeat("x", 20000)
	keys := []string{long, long + "y", "bin\x00\xff", hashedKey + "abc"}
	until := time.Now().Add(time.Minute)
	waitListening(t, a, b)
	for i, k := range keys {
		wake, unsub := b.Subscribe(k)
		l, err := a.TryAcquire(ctx, k, time.Minute)
		if err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
		if _, err := a.Save(ctx, k, []byte{byte(i)}, backend.Save{Fence: l.Fence(), Token: l.Token(), Release: true, Until: until}); err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
		select {
		case <-wake:
		case <-time.After(10 * time.Second):
			t.Fatalf("key %d: waiter not woken", i)
		}
		unsub()
	}
	for i, k := range keys {
		got, err := b.Load(ctx, k)
		if err != nil || !bytes.Equal(got, []byte{byte(i)}) {
			t.Fatalf("key %d: Load = %v, %v", i, got, err)
		}
	}
}
