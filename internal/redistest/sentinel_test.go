package redistest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// failoverBound is far more than a failover takes (about three seconds):
// only a topology that never fails over exceeds it.
const failoverBound = time.Minute

func TestSentinel_failover(t *testing.T) {
	t.Parallel() // a topology of its own, mostly waiting on timers
	s := StartSentinel(t)
	if got := len(s.Addrs()); got != 3 {
		t.Fatalf("%d sentinels, want 3", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), failoverBound)
	defer cancel()
	if names := s.MasterAddrs(ctx); names[0] != s.Primary().Addr() {
		t.Fatalf("sentinels name %v as master, want %s", names, s.Primary().Addr())
	}
	c := s.FailoverClient(func(o *redis.FailoverOptions) { o.MaxRetries = -1 })
	if err := c.Set(ctx, "kept", "1", 0).Err(); err != nil {
		t.Fatalf("SET through the sentinels: %v", err)
	}
	if err := s.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	// A write the replica never receives is lost with the primary.
	s.ReplicationLink().Cut()
	if err := c.Set(ctx, "lost", "1", 0).Err(); err != nil {
		t.Fatalf("SET with the replication link cut: %v", err)
	}
	if err := s.Primary().Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitMaster(ctx, s.Replica().Addr()); err != nil {
		t.Fatal(err)
	}
	got, err := eventually(ctx, func() (string, error) { return c.Get(ctx, "kept").Result() })
	if err != nil || got != "1" {
		t.Fatalf("GET kept after the failover = %q, %v; want 1", got, err)
	}
	if err := c.Get(ctx, "lost").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET lost after the failover: err = %v, want redis.Nil", err)
	}
}

func TestSentinel_replicationLink(t *testing.T) {
	t.Parallel() // a topology of its own, mostly waiting on timers
	s := StartSentinel(t)
	ctx, cancel := context.WithTimeout(context.Background(), failoverBound)
	defer cancel()
	p := s.Primary().Client()
	r := s.Replica().Client()
	s.ReplicationLink().Cut()
	if err := p.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET on the replica with its link cut: err = %v, want redis.Nil", err)
	}
	s.ReplicationLink().Restore()
	if err := s.WaitReplicated(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := r.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET on the replica after Restore = %q, %v; want v", got, err)
	}
}

// eventually retries op every 50 ms until it succeeds or ctx ends, for
// clients that need a moment to find a new master.
func eventually[T any](ctx context.Context, op func() (T, error)) (T, error) {
	for {
		v, err := op()
		if err == nil || ctx.Err() != nil {
			return v, err
		}
		sleep(ctx, 50*time.Millisecond)
	}
}
