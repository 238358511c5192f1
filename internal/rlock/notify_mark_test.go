package rlock

import (
	"testing"
	"time"
)

// signalled reports whether ch holds a signal, without waiting.
func signalled(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestMemoryNotifier_subscribeSince covers the window between a look and
// the subscription of a caller that must wait: an announcement delivered
// in it signals the subscription at once; one delivered before the mark
// does not, nor does one of another key (unless it shares a slot).
func TestMemoryNotifier_subscribeSince(t *testing.T) {
	var n MemoryNotifier
	_ = n.Notify(testCtx(t), "k") // before the mark: old news
	m := n.Mark()
	ch, stop := n.SubscribeSince("k", m)
	if signalled(ch) {
		t.Fatal("an announcement made before the mark signalled the subscription")
	}
	stop()

	m = n.Mark()
	_ = n.Notify(testCtx(t), "k") // between the look and the subscription
	ch, stop = n.SubscribeSince("k", m)
	defer stop()
	if !signalled(ch) {
		t.Fatal("an announcement made after the mark, before the subscription, was lost")
	}

	other := "other"
	for markSlot(other) == markSlot("k") {
		other += "x"
	}
	m = n.Mark()
	_ = n.Notify(testCtx(t), other)
	ch2, stop2 := n.SubscribeSince("k", m)
	defer stop2()
	if signalled(ch2) {
		t.Fatal("another key's announcement signalled the subscription")
	}
	_ = n.Notify(testCtx(t), "k") // after the subscription: delivered as usual
	if !signalled(ch2) {
		t.Fatal("an announcement after the subscription was not delivered")
	}
}

// TestRedisNotifier_subscribeSince is the same window across processes:
// the announcement is published by a release on another client and
// delivered before the waiter subscribes.
func TestRedisNotifier_subscribeSince(t *testing.T) {
	sub := newNotifier(t, srv.Client(), t.Name())
	l, err := NewRedis(rdb, RedisOptions{Namespace: t.Name(), Announce: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	lease, err := l.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	m := sub.Mark() // the waiter's look finds the lock held ...
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// ... and the release's announcement arrives before it subscribes.
	deadline := time.Now().Add(5 * time.Second)
	for sub.Mark() == m {
		if time.Now().After(deadline) {
			t.Fatal("the announcement was not delivered within 5s")
		}
		time.Sleep(time.Millisecond)
	}
	ch, stop := sub.SubscribeSince("k", m)
	defer stop()
	if !signalled(ch) {
		t.Fatal("the announcement delivered before the subscription was lost")
	}
}
