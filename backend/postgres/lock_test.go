package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
)

func TestLock_TryAcquire_exclusiveAndFencesGrow(t *testing.T) {
	f := newFixture(t, Options{})
	a, b := f.open("ns", 0), f.open("ns", 0)
	ctx := testCtx(t)

	l1, err := a.TryAcquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if l1.TookOver() || l1.Fence() <= 0 {
		t.Fatalf("first grant: TookOver=%v fence=%d", l1.TookOver(), l1.Fence())
	}
	if _, err := b.TryAcquire(ctx, "k", 10*time.Second); !errors.Is(err, backend.ErrNotAcquired) {
		t.Fatalf("second TryAcquire = %v, want ErrNotAcquired", err)
	}
	held, rem, err := b.Inspect(ctx, "k")
	if err != nil || !held || rem <= 5*time.Second || rem > 10*time.Second {
		t.Fatalf("Inspect = %v, %v, %v; want held with about 10s left", held, rem, err)
	}
	// Another namespace is another lock.
	other := f.open("other", 0)
	lo, err := other.TryAcquire(ctx, "k", time.Second)
	if err != nil {
		t.Fatalf("TryAcquire in another namespace = %v", err)
	}
	_ = lo.Release(ctx)

	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if held, _, _ := b.Inspect(ctx, "k"); held {
		t.Fatal("Inspect after Release: held")
	}
	if err := a.Release(ctx, "k", l1.Token()); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("Release of a released token = %v, want ErrNotHeld", err)
	}
	if err := a.Extend(ctx, "k", l1.Token(), time.Second); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("Extend of a released token = %v, want ErrNotHeld", err)
	}
	l2, err := b.TryAcquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	if l2.Fence() <= l1.Fence() {
		t.Fatalf("second grant's fence %d <= first's %d", l2.Fence(), l1.Fence())
	}
}

func TestLock_leaseExpires(t *testing.T) {
	f := newFixture(t, Options{})
	s := f.open("ns", 0)
	ctx := testCtx(t)
	l1, err := s.TryAcquire(ctx, "k", 150*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	l2, err := s.TryAcquire(ctx, "k", time.Second)
	if err != nil {
		t.Fatalf("TryAcquire after the lease ended = %v", err)
	}
	if l2.TookOver() {
		t.Fatal("a lock whose lease ended is free, not taken over")
	}
	if err := l1.Extend(ctx, time.Second); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("Extend of the expired lease = %v, want ErrNotHeld", err)
	}
	_ = l2.Release(ctx)
}

func TestLock_takeOver_afterTwoMissedBeats(t *testing.T) {
	f := newFixture(t, Options{})
	// The holder beats every 50ms (its declared period); the waiter's own
	// setting differs, and does not matter.
	holder, waiter := f.open("ns", 50*time.Millisecond), f.open("ns", time.Second)
	ctx := testCtx(t)

	dead, err := holder.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waiter.TryAcquire(ctx, "k", time.Minute); !errors.Is(err, backend.ErrNotAcquired) {
		t.Fatalf("TryAcquire right after the grant = %v, want ErrNotAcquired", err)
	}
	// A live holder: beats keep it.
	live, err := holder.TryAcquire(ctx, "live", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	kctx, stop := context.WithCancel(ctx)
	defer stop()
	live.KeepAlive(kctx, nil)

	time.Sleep(300 * time.Millisecond) // six beats of the holder's period
	next, err := waiter.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatalf("TryAcquire of a silent holder's lock = %v", err)
	}
	if !next.TookOver() || next.Fence() <= dead.Fence() {
		t.Fatalf("take-over: TookOver=%v fence %d (dead holder's %d)", next.TookOver(), next.Fence(), dead.Fence())
	}
	if _, err := waiter.TryAcquire(ctx, "live", time.Minute); !errors.Is(err, backend.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a beating holder's lock = %v, want ErrNotAcquired", err)
	}
	// The superseded holder writes nothing and learns it lost the lease.
	_, err = holder.Save(ctx, "k", []byte("late"), backend.Save{Fence: dead.Fence(), Token: dead.Token(),
		Release: true, Until: time.Now().Add(time.Minute)})
	if !errors.Is(err, backend.ErrLockLost) {
		t.Fatalf("Save by the superseded holder = %v, want ErrLockLost", err)
	}
	if err := dead.Extend(ctx, time.Minute); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("Extend by the superseded holder = %v, want ErrNotHeld", err)
	}
	if v, _ := waiter.Load(ctx, "k"); v != nil {
		t.Fatalf("Load = %q, want nothing", v)
	}
	stop()
	_ = live.Release(ctx)
	_ = next.Release(ctx)
}

func TestLock_errors_contextAndBackend(t *testing.T) {
	f := newFixture(t, Options{})
	s := f.open("ns", 0)
	ctx := testCtx(t)
	if err := f.backend().Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.TryAcquire(done, "k", time.Second); !errors.Is(err, context.Canceled) || errors.Is(err, backend.ErrBackend) {
		t.Fatalf("TryAcquire on an ended ctx = %v, want context.Canceled", err)
	}
	short, cancel := context.WithTimeout(ctx, time.Microsecond)
	defer cancel()
	time.Sleep(time.Millisecond)
	if _, _, err := s.Inspect(short, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Inspect past its deadline = %v, want DeadlineExceeded", err)
	}

	// A database that refuses: the tables are gone and cannot be created
	// (the schema does not exist), as a backend failure.
	g := newFixture(t, Options{Schema: "missing"})
	m := g.open("ns", 0)
	_, err := m.TryAcquire(ctx, "k", time.Second)
	var be *backend.BackendError
	if !errors.As(err, &be) || be.Op != "acquire" {
		t.Fatalf("TryAcquire on a failing database = %v, want a *backend.BackendError", err)
	}
	if _, _, err := m.Inspect(ctx, "k"); !errors.Is(err, backend.ErrBackend) {
		t.Fatalf("Inspect on a failing database = %v, want ErrBackend", err)
	}
	if _, err := m.Load(ctx, "k"); err == nil {
		t.Fatal("Load on a failing database: no error")
	}
}

func TestLock_TryAcquire_givenUpMidStatement_leavesNoLock(t *testing.T) {
	f := newFixture(t, Options{})
	s := f.open("ns", 0)
	ctx := testCtx(t)
	l, err := s.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	// Another transaction holds the key's row: the acquire waits for it,
	// its caller gives up, and the row is let go after, when the server
	// still runs the acquire for a client that has left.
	tx, err := s.b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SELECT 1 FROM "+s.b.q.lockT+" WHERE key = 'k' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = s.TryAcquire(short, "k", time.Minute)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryAcquire that waited past its deadline = %v, want DeadlineExceeded", err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	s.cleanups.Wait()
	if held, _, err := s.Inspect(ctx, "k"); held || err != nil {
		t.Fatalf("Inspect after the abandoned acquire = %v, %v; want a free lock", held, err)
	}
}
