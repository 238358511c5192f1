package rlock

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/rkey"
)

// TestRedis_lockHashFields checks that a granted lock holds exactly the
// fields internal/rkey names, which readers outside this package (the
// operator command) rely on.
func TestRedis_lockHashFields(t *testing.T) {
	ctx := context.Background()
	ns := redistest.Namespace(t)
	r, err := NewRedis(rdb, RedisOptions{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	l, err := r.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Release(ctx) }()
	keys, _ := rkey.New("", ns)
	got, err := rdb.HKeys(ctx, keys.Lock("k")).Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	want := []string{rkey.LockFence, rkey.LockBeat, rkey.LockDeadAfter, rkey.LockToken}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("lock hash fields %q, want %q", got, want)
	}
}
