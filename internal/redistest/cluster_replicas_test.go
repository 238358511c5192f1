package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestReplicatedCluster_failover(t *testing.T) {
	t.Parallel() // a topology of its own, mostly waiting on timers
	c := StartReplicatedCluster(t, 3)
	if got := len(c.Nodes()); got != 6 {
		t.Fatalf("%d nodes, want 6", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), failoverBound)
	defer cancel()
	// go-redis reloads its slot map on MOVED, or every
	// ClusterStateReloadInterval (default: a minute), not when a master
	// stops answering: reload often, to find the promoted replica.
	cc := c.Client(func(o *redis.ClusterOptions) { o.ClusterStateReloadInterval = 200 * time.Millisecond })
	const key = "{user:42}:v"
	slot := KeySlot(key)
	if got, err := cc.ClusterKeySlot(ctx, key).Result(); err != nil || int(got) != slot {
		t.Fatalf("CLUSTER KEYSLOT %s = %d, %v; KeySlot says %d", key, got, err, slot)
	}
	if err := cc.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old, err := c.SlotMaster(ctx, c.Addrs()[0], slot)
	if err != nil {
		t.Fatal(err)
	}
	// The replica must hold the value before its master dies.
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		return m.Do(ctx, "WAIT", 1, 5000).Err()
	}); err != nil {
		t.Fatal(err)
	}
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	m, err := c.WaitSlotMaster(ctx, slot, old)
	if err != nil {
		t.Fatal(err)
	}
	if m == old {
		t.Fatalf("slot %d still on the killed node", slot)
	}
	got, err := eventually(ctx, func() (string, error) { return cc.Get(ctx, key).Result() })
	if err != nil || got != "v" {
		t.Fatalf("GET after the failover = %q, %v; want v", got, err)
	}
}

func TestKeySlot(t *testing.T) {
	for key, want := range map[string]int{
		"":             0,
		"foo":          12182,
		"{user1000}.a": 3443,
		"{user1000}.b": 3443,
		"{}x":          KeySlot("{}x"),
		"123456789":    12739, // CRC-16/XMODEM check value 0x31C3
	} {
		if got := KeySlot(key); got != want {
			t.Errorf("KeySlot(%q) = %d, want %d", key, got, want)
		}
	}
	if KeySlot("{a}b") != KeySlot("a") {
		t.Error("a hash tag does not decide the slot")
	}
}
