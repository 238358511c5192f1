package lock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/herdguard/herdguard/backend"
)

func TestMemory_TryAcquire_heldReleaseFence(t *testing.T) {
	var m Memory
	ctx := context.Background()
	a, err := m.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.TryAcquire(ctx, "k", time.Minute); !errors.Is(err, backend.ErrNotAcquired) {
		t.Fatalf("second acquire: %v, want backend.ErrNotAcquired", err)
	}
	if held, left, _ := m.Inspect(ctx, "k"); !held || left <= 0 {
		t.Fatalf("Inspect = %v %v, want held", held, left)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := m.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if b.Fence() <= a.Fence() {
		t.Fatalf("fence %d not above %d", b.Fence(), a.Fence())
	}
	// The old grant cannot release or extend the new one.
	if err := a.Extend(ctx, time.Minute); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("stale extend: %v, want backend.ErrNotHeld", err)
	}
	_ = b.Release(ctx)
}

func TestMemory_lease_expiresAndWatchdogExtends(t *testing.T) {
	// The bubble's clock moves only when every goroutine in it waits:
	// the lease ends exactly when it says, and the watchdog's beats are
	// never late.
	synctest.Test(t, func(t *testing.T) {
		var m Memory
		ctx := context.Background()
		a, _ := m.TryAcquire(ctx, "short", 30*time.Millisecond)
		time.Sleep(29 * time.Millisecond)
		if _, err := m.TryAcquire(ctx, "short", time.Minute); !errors.Is(err, backend.ErrNotAcquired) {
			t.Fatalf("acquire within the lease: %v, want backend.ErrNotAcquired", err)
		}
		time.Sleep(2 * time.Millisecond)
		if err := a.Release(ctx); !errors.Is(err, backend.ErrNotHeld) {
			t.Fatalf("release after expiry: %v, want backend.ErrNotHeld", err)
		}
		w, _ := m.TryAcquire(ctx, "watched", 600*time.Millisecond)
		w.KeepAlive(ctx, nil)
		time.Sleep(10 * time.Second) // over sixteen leases
		if _, err := m.TryAcquire(ctx, "watched", time.Minute); !errors.Is(err, backend.ErrNotAcquired) {
			t.Fatalf("watched lock was lost: %v", err)
		}
		if err := w.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		synctest.Wait() // the watchdog has seen the release and ended
	})
}

func TestMemory_badArgsAndCtx(t *testing.T) {
	var m Memory
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.TryAcquire(ctx, "k", time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
	if _, err := m.TryAcquire(context.Background(), "", time.Second); err == nil {
		t.Fatal("empty key accepted")
	}
	if _, err := m.TryAcquire(context.Background(), "k", 0); err == nil {
		t.Fatal("zero lease accepted")
	}
}

// TestMemory_errorsNameNoKey: an error of the in-process locker does not
// quote the key (keys may be secrets).
func TestMemory_errorsNameNoKey(t *testing.T) {
	const secretKey = "secret-7f3a9c"
	var m Memory
	_, err := m.TryAcquire(context.Background(), secretKey, -time.Second)
	if err == nil {
		t.Fatal("TryAcquire with no lease: no error")
	}
	if strings.Contains(err.Error(), secretKey) {
		t.Fatalf("error %q names the key", err)
	}
}

func TestMemoryNotifier_deliversToSubscribers(t *testing.T) {
	var n MemoryNotifier
	ch, stop := n.Subscribe("k")
	_ = n.Notify(context.Background(), "k")
	select {
	case <-ch:
	case <-time.After(time.Second):
		t.Fatal("no signal")
	}
	stop()
	stop() // idempotent
}
