package rlock

import (
	"errors"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/internal/redistest"
)

// TryAcquireOrGetMany answers each key as TryAcquireOrGet would, in one
// pipeline; ReleaseMany gives the grants back, and ExtendMany sees a lease
// that is gone.
func TestRedis_TryAcquireOrGetMany(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	l := newLocker(t, c)
	ctx := testCtx(t)
	held := acquire(t, l, "held", time.Minute)
	looks := l.TryAcquireOrGetMany(ctx, []string{"a", "held", "b"}, time.Minute, time.Now())
	if len(looks) != 3 {
		t.Fatalf("%d looks, want 3", len(looks))
	}
	if looks[0].Lease == nil || looks[2].Lease == nil || looks[0].Err != nil || looks[2].Err != nil {
		t.Fatalf("a, b: %+v %+v, want granted", looks[0], looks[2])
	}
	if !errors.Is(looks[1].Err, backend.ErrNotAcquired) || looks[1].Lease != nil {
		t.Fatalf("held: %+v, want backend.ErrNotAcquired", looks[1])
	}
	if looks[0].Lease.Fence() <= 0 || looks[0].Lease.Key() != "a" {
		t.Errorf("a's lease: key %q fence %d", looks[0].Lease.Key(), looks[0].Lease.Fence())
	}
	// The grants hold until released: another look finds them taken.
	again := l.TryAcquireOrGetMany(ctx, []string{"a", "b"}, time.Minute, time.Now())
	for i, lk := range again {
		if !errors.Is(lk.Err, backend.ErrNotAcquired) {
			t.Errorf("look %d again: %+v, want backend.ErrNotAcquired", i, lk)
		}
	}
	lost, err := l.ExtendMany(ctx, []*backend.Lease{looks[0].Lease, looks[2].Lease})
	if err != nil || lost[0] || lost[1] {
		t.Fatalf("ExtendMany: %v %v, want both extended", lost, err)
	}
	if err := l.ReleaseMany(ctx, []*backend.Lease{looks[0].Lease, looks[2].Lease}); err != nil {
		t.Fatalf("ReleaseMany: %v", err)
	}
	lost, err = l.ExtendMany(ctx, []*backend.Lease{looks[0].Lease, held})
	if err != nil || !lost[0] || lost[1] {
		t.Fatalf("ExtendMany after release: %v %v, want a lost, held kept", lost, err)
	}
	free := l.TryAcquireOrGetMany(ctx, []string{"a", "b"}, time.Minute, time.Now())
	for i, lk := range free {
		if lk.Lease == nil {
			t.Errorf("look %d after ReleaseMany: %+v, want granted", i, lk)
		} else {
			_ = lk.Lease.Release(ctx)
		}
	}
	_ = held.Release(ctx)
}

// ReleaseMany releases a lease that another locker granted through that
// locker (its key space), not through its own scripts.
func TestRedis_ReleaseMany_anotherLockersLease(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	l := newLocker(t, c)
	other, err := NewRedis(c, RedisOptions{Namespace: namespace(t) + "-other"})
	if err != nil {
		t.Fatalf("NewRedis: %v", err)
	}
	ctx := testCtx(t)
	mine, theirs := acquire(t, l, "k", time.Minute), acquire(t, other, "k", time.Minute)
	if err := l.ReleaseMany(ctx, []*backend.Lease{mine, theirs}); err != nil {
		t.Fatalf("ReleaseMany: %v", err)
	}
	for _, lk := range []*Redis{l, other} {
		again := acquire(t, lk, "k", time.Minute)
		_ = again.Release(ctx)
	}
}
