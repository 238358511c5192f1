package rlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/internal/redistest"
)

// newNotifier returns a ready notifier of namespace on client, closed when
// the test ends.
func newNotifier(t *testing.T, client redis.UniversalClient, namespace string) *RedisNotifier {
	t.Helper()
	n, err := NewRedisNotifier(client, RedisOptions{Namespace: namespace})
	if err != nil {
		t.Fatalf("NewRedisNotifier: %v", err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})
	if err := n.Ready(testCtx(t)); err != nil {
		t.Fatalf("Ready() = %v", err)
	}
	return n
}

// receive waits (bounded) for a signal on ch.
func receive(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("no announcement for %s within 5s", what)
	}
}

func TestNewRedisNotifier_invalid(t *testing.T) {
	if _, err := NewRedisNotifier(nil, RedisOptions{Namespace: "n"}); err == nil {
		t.Error("NewRedisNotifier(nil) succeeded")
	}
	if _, err := NewRedisNotifier(rdb, RedisOptions{}); err == nil {
		t.Error("NewRedisNotifier without a namespace succeeded")
	}
}

func TestRedisNotifier_deliversAcrossClients(t *testing.T) {
	pub := newNotifier(t, srv.Client(), t.Name())
	sub := newNotifier(t, srv.Client(), t.Name())
	ctx := testCtx(t)

	k1, stop1 := sub.Subscribe("k")
	defer stop1()
	k2, stop2 := sub.Subscribe("k") // a second local waiter of the same key
	defer stop2()
	other, stopOther := sub.Subscribe("other")
	defer stopOther()
	self, stopSelf := pub.Subscribe("k") // the publisher's own process hears it too
	defer stopSelf()

	if err := pub.Notify(ctx, "k"); err != nil {
		t.Fatalf("Notify() = %v", err)
	}
	receive(t, k1, "k (first waiter)")
	receive(t, k2, "k (second waiter)")
	receive(t, self, "k (publisher's process)")
	// Announcements arrive in order on the one subscription: once a later
	// one for "marker" is in, an announcement for "other" would have been.
	marker, stopMarker := sub.Subscribe("marker")
	defer stopMarker()
	if err := pub.Notify(ctx, "marker"); err != nil {
		t.Fatal(err)
	}
	receive(t, marker, "marker")
	select {
	case <-other:
		t.Fatal(`a subscriber of "other" was woken by another key`)
	default:
	}
}

func TestRedisNotifier_namespacesAreSeparate(t *testing.T) {
	a := newNotifier(t, rdb, t.Name()+"-a")
	b := newNotifier(t, srv.Client(), t.Name()+"-b")
	ctx := testCtx(t)
	k, stopK := b.Subscribe("k")
	defer stopK()
	marker, stopMarker := b.Subscribe("marker")
	defer stopMarker()
	if err := a.Notify(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := b.Notify(ctx, "marker"); err != nil {
		t.Fatal(err)
	}
	receive(t, marker, "marker")
	select {
	case <-k:
		t.Fatal("an announcement crossed namespaces")
	default:
	}
}

func TestRedisNotifier_unsubscribe(t *testing.T) {
	n := newNotifier(t, rdb, t.Name())
	_, stop := n.Subscribe("k")
	if got := n.f.subscribers("k"); got != 1 {
		t.Fatalf("subscribers = %d, want 1", got)
	}
	stop()
	stop()
	if got := n.f.subscribers("k"); got != 0 {
		t.Fatalf("subscribers after unsubscribe = %d, want 0", got)
	}
}

func TestRedisNotifier_Close(t *testing.T) {
	n, err := NewRedisNotifier(rdb, RedisOptions{Namespace: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Ready(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("second Close() = %v", err)
	}
	select {
	case <-n.done:
	default:
		t.Fatal("Close returned before the receive goroutine ended")
	}
	// Ready on a notifier that never subscribed, closed before Redis answered.
	s := redistest.Start(t)
	c := s.Client()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	m, err := NewRedisNotifier(c, RedisOptions{Namespace: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("Close() of a never-ready notifier = %v", err)
	}
	if err := m.Ready(testCtx(t)); err == nil {
		t.Fatal("Ready() after Close succeeded")
	}
}

func TestRedisNotifier_Ready_ctxEnds(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	n, err := NewRedisNotifier(c, RedisOptions{Namespace: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := n.Ready(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Ready() with Redis down = %v, want context.DeadlineExceeded", err)
	}
}

func TestRedisNotifier_Notify_redisKilled(t *testing.T) {
	s := redistest.Start(t)
	n := newNotifier(t, s.Client(func(o *redis.Options) { o.MaxRetries = -1 }), t.Name())
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	err := n.Notify(testCtx(t), "k")
	var be *backend.BackendError
	if !errors.As(err, &be) || be.Op != "notify" {
		t.Fatalf("Notify() with Redis down = %v, want a backend.BackendError for notify", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := n.Notify(ctx, "k"); !errors.Is(err, context.Canceled) || errors.Is(err, backend.ErrBackend) {
		t.Fatalf("Notify() with a cancelled ctx = %v, want only context.Canceled", err)
	}
}

func TestRedisNotifier_resubscribesAfterRestart(t *testing.T) {
	s := redistest.Start(t)
	sub := newNotifier(t, s.Client(), t.Name())
	pub := s.Client()
	ch, stop := sub.Subscribe("k")
	defer stop()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	// Announcements published before go-redis has re-subscribed are lost
	// (delivery is best effort), so publish until one arrives.
	deadline := time.After(15 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		_ = pub.Publish(testCtx(t), sub.channel, "k").Err()
		select {
		case <-ch:
			return
		case <-deadline:
			t.Fatal("no announcement delivered within 15s of the restart")
		case <-tick.C:
		}
	}
}

func TestRedisNotifier_cluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	pub := newNotifier(t, c.Client(), t.Name())
	sub := newNotifier(t, c.Client(), t.Name())
	ch, stop := sub.Subscribe("k")
	defer stop()
	if err := pub.Notify(testCtx(t), "k"); err != nil {
		t.Fatal(err)
	}
	receive(t, ch, "k")
}
