package rlock

import (
	"context"
	"testing"
	"time"
)

func TestMemoryNotifier_deliversToSubscribers(t *testing.T) {
	var n MemoryNotifier
	ch, stop := n.Subscribe("k")
	other, stopOther := n.Subscribe("other")
	defer stopOther()
	_ = n.Notify(context.Background(), "k")
	select {
	case <-ch:
	case <-time.After(time.Second):
		t.Fatal("no signal")
	}
	select {
	case <-other:
		t.Fatal("signal for another key")
	default:
	}
	stop()
	stop() // idempotent
	if n.f.subscribers("k") != 0 {
		t.Fatal("subscription not removed")
	}
}

// subscribers returns how many subscriptions key has.
func (f *fanout) subscribers(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs[key])
}
