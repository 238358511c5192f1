package slotreload

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// reloadCounter counts the slot map reloads it is asked for.
type reloadCounter struct{ n atomic.Int64 }

func (c *reloadCounter) ReloadState(context.Context) { c.n.Add(1) }

// TestReloader_rateLimited checks that failures ask for a reload at
// once, then at most once per Every, however many callers fail.
func TestReloader_rateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &reloadCounter{}
		r := &Reloader{client: c, start: time.Now()}
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 100 {
					r.Failed()
					time.Sleep(Every / 20)
				}
			})
		}
		wg.Wait()
		// 100 steps of Every/20: 5 periods, a reload at the
		// start of each.
		if got := c.n.Load(); got != 5 {
			t.Errorf("%d reloads over 5 periods of failures, want 5", got)
		}
		time.Sleep(Every)
		r.Failed()
		if got := c.n.Load(); got != 6 {
			t.Errorf("%d reloads after a quiet period, want 6", got)
		}
	})
}

// TestNew_clusterClientsOnly checks that only a Cluster client
// gets a reloader, and that a nil reloader does nothing.
func TestNew_clusterClientsOnly(t *testing.T) {
	single := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"})
	defer single.Close()
	if r := New(single); r != nil {
		t.Errorf("a single-node client got a reloader")
	}
	var typedNil *redis.ClusterClient
	if r := New(typedNil); r != nil {
		t.Errorf("a nil *redis.ClusterClient got a reloader")
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:0"}})
	defer cc.Close()
	if r := New(cc); r == nil {
		t.Errorf("a cluster client got no reloader")
	}
	var none *Reloader
	none.Failed()
}
