package postgres

import (
	"errors"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
)

func TestListener_lostConnection_resetsWatchersAndWakesWaiters(t *testing.T) {
	s := server(t)
	f := newFixture(t, Options{Poll: 20 * time.Millisecond})
	a, b := f.open("ns", 0), f.open("ns", 0)
	ctx := testCtx(t)
	var r recorder
	stop := b.Watch(r.onWrite, r.onReset)
	defer stop()
	waitListening(t, a, b)
	wake, unsub := b.Subscribe("k")
	defer unsub()
	time.Sleep(20 * time.Millisecond)
	_, before := r.state()
	select { // drain the wake-up of the connection coming up
	case <-wake:
	default:
	}

	if !b.Subscribed() {
		t.Fatal("Subscribed = false with the LISTEN connection up")
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Subscribed = false with the database down", func() bool { return !b.Subscribed() })
	// While the database is down: the lock's methods fail as the
	// backend's failures, and waiters are woken to look again.
	_, err := a.TryAcquire(ctx, "k", time.Second)
	var be *backend.BackendError
	if !errors.As(err, &be) {
		t.Fatalf("TryAcquire with the database down = %v, want a *backend.BackendError", err)
	}
	if err := a.Ping(ctx); err == nil {
		t.Fatal("Ping with the database down: no error")
	}
	select {
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("waiters not woken while notifications cannot come")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "watcher reset after the LISTEN connection came back", func() bool {
		_, n := r.state()
		return n > before && b.Subscribed()
	})
	waitListening(t, a)
	if err := a.Announce(ctx, "k", "a"); err != nil {
		t.Fatalf("Announce after the restart: %v", err)
	}
	eventually(t, "announcement heard after the restart", func() bool {
		w, _ := r.state()
		return len(w) == 1 && w[0] == "a/k"
	})
}
