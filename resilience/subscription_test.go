package resilience

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/rlock"
)

// TestHealth_blackholedSubscription: pipeline B's link to Redis falls
// into a black hole (bytes dropped, connections kept open). Its
// subscription is found dead within rlock.NotifierDeadAfter (Health says
// so), subscribed again on a new connection when the link heals (B drops
// its L1, as after a reconnect), and B hears the next Set of pipeline A,
// on another client, long before its L1TTL would have ended the old copy.
func TestHealth_blackholedSubscription(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	a := redisPods(t, srv, "w-blackhole", 1, nil)[0]
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr()}) // the defaults
	t.Cleanup(func() { _ = client.Close() })
	b := build(t, New[string]("w-blackhole").Cache(time.Minute).Redis(client).Lock(LockSettings{}))
	waitFor(t, func() bool { return b.Health().Subscribed })
	s := newSource("v1")
	mustGet(t, a, "k", s.load)
	mustGet(t, b, "k", s.load)
	before := b.writes.resubscribed.Load()

	proxy.Blackhole()
	// The last byte came at the latest now; one ping interval of slack
	// for a loaded machine.
	took := within(t, rlock.NotifierDeadAfter+rlock.NotifierPingInterval, "Health().Subscribed false in the black hole",
		func() bool { return !b.Health().Subscribed })
	t.Logf("FIGURES a black-holed subscription reported down after %v", took.Round(time.Millisecond))
	proxy.Restore()
	took = within(t, 2*rlock.NotifierDeadAfter, "Health().Subscribed true after the link healed",
		func() bool { return b.Health().Subscribed })
	t.Logf("FIGURES subscribed again %v after the link healed", took.Round(time.Millisecond))
	if b.writes.resubscribed.Load() == before {
		t.Fatal("B is subscribed again, yet did not drop its L1")
	}
	if v, ok := l1Value(b, "k"); ok {
		t.Fatalf("B's L1 still holds k = %q after subscribing again", v)
	}

	// B's L1 holds v1 again; A's Set must reach it.
	if r := mustGet(t, b, "k", s.load); r.Value != "v1" {
		t.Fatalf("B: Get(k) = %q (%v), want v1 from Redis", r.Value, r.Source)
	}
	if v, ok := l1Value(b, "k"); !ok || v != "v1" {
		t.Fatalf("B's L1 after Get: %q, %v; want v1", v, ok)
	}
	if err := a.Set(ctxT(t), "k", "v2"); err != nil {
		t.Fatal(err)
	}
	took = within(t, 5*time.Second, "B dropping its copy of k after A's Set", func() bool {
		v, ok := l1Value(b, "k")
		return !ok || v != "v1"
	})
	t.Logf("FIGURES B heard A's Set after %v", took.Round(time.Millisecond))
	if r := mustGet(t, b, "k", s.load); r.Value != "v2" {
		t.Fatalf("B: Get(k) after A's Set = %q (%v), want v2", r.Value, r.Source)
	}
}
