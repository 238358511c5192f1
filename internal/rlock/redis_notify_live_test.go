package rlock

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/redistest"
)

// within polls cond until it holds, or fails the test after bound.
func within(t *testing.T, bound time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > bound {
			t.Fatalf("%s: not within %v", what, bound)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

// TestRedisNotifier_blackholeResubscribes: a subscription whose link
// stops carrying bytes without closing is found dead within
// NotifierDeadAfter (plus the slack of one ping interval), reported down,
// and subscribed again on a new connection once the link is back, where
// it hears announcements again.
func TestRedisNotifier_blackholeResubscribes(t *testing.T) {
	s := redistest.Start(t)
	p := redistest.StartProxy(t, s.Addr())
	client := redis.NewClient(&redis.Options{Addr: p.Addr()}) // the defaults
	t.Cleanup(func() { _ = client.Close() })
	n := newNotifier(t, client, t.Name())
	confirmations := make(chan int, 16)
	n.SetHooks(NotifierHooks{OnSubscribed: func(c int) { confirmations <- c }})
	ch, stop := n.Subscribe("k")
	defer stop()
	if !n.Subscribed() {
		t.Fatal("Subscribed() = false after Ready")
	}

	p.Blackhole()
	took := within(t, NotifierDeadAfter+2*NotifierPingInterval, "Subscribed() false in the black hole",
		func() bool { return !n.Subscribed() })
	t.Logf("a silent subscription was found dead after %v (NotifierDeadAfter %v)", took.Round(time.Millisecond), NotifierDeadAfter)

	p.Restore()
	took = within(t, 10*time.Second, "Subscribed() true after Restore", n.Subscribed)
	t.Logf("subscribed again %v after the link came back", took.Round(time.Millisecond))
	select {
	case c := <-confirmations:
		if c < 2 {
			t.Fatalf("OnSubscribed(%d) after the black hole, want a re-subscription (2 or more)", c)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no OnSubscribed after the re-subscription")
	}
	if err := s.Client().Publish(testCtx(t), n.channel, "k").Err(); err != nil {
		t.Fatal(err)
	}
	receive(t, ch, "k after the black hole")
}
