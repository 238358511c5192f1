package rlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/rkey"
)

// newBeatingLocker returns a locker whose holders beat every beat.
func newBeatingLocker(t *testing.T, client RedisClient, beat time.Duration) *Redis {
	t.Helper()
	l, err := NewRedis(client, RedisOptions{Namespace: namespace(t), Heartbeat: beat})
	if err != nil {
		t.Fatalf("NewRedis: %v", err)
	}
	return l
}

func TestRedisLock_TryAcquire_takesOverAHolderThatStoppedBeating(t *testing.T) {
	l := newBeatingLocker(t, rdb, 50*time.Millisecond)
	ctx := testCtx(t)
	// A holder that never beats (no KeepAlive): it is dead 100 ms after
	// its grant, long before its one-minute lease ends.
	dead := acquire(t, l, "k", time.Minute)
	if dead.TookOver() {
		t.Fatal("a grant of a free lock reports a take-over")
	}
	var taken *backend.Lease
	for deadline := time.Now().Add(10 * time.Second); taken == nil; {
		ls, err := l.TryAcquire(ctx, "k", time.Minute)
		switch {
		case err == nil:
			taken = ls
		case !errors.Is(err, backend.ErrNotAcquired):
			t.Fatalf("TryAcquire() = %v", err)
		case time.Now().After(deadline):
			t.Fatal("a holder that stopped beating was never taken over")
		default:
			time.Sleep(10 * time.Millisecond)
		}
	}
	defer taken.Release(ctx)
	if !taken.TookOver() || taken.Fence() <= dead.Fence() {
		t.Fatalf("take-over: TookOver %v, fence %d after %d", taken.TookOver(), taken.Fence(), dead.Fence())
	}
	// Exactly one: the new holder is alive, so the next attempt waits.
	if _, err := l.TryAcquire(ctx, "k", time.Minute); !errors.Is(err, backend.ErrNotAcquired) {
		t.Fatalf("TryAcquire() right after a take-over = %v, want backend.ErrNotAcquired", err)
	}
	if err := dead.Extend(ctx, time.Minute); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("the dead holder's Extend() = %v, want backend.ErrNotHeld", err)
	}
	if err := dead.Release(ctx); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("the dead holder's Release() = %v, want backend.ErrNotHeld", err)
	}
}

func TestRedisLock_KeepAlive_beatingHolderIsNotTakenOver(t *testing.T) {
	// The holder beats every 200 ms, so it is dead 400 ms after a beat;
	// the other process's own setting is ten times longer: the holder's
	// declaration decides.
	ns := namespace(t)
	holder, err := NewRedis(rdb, RedisOptions{Namespace: ns, Heartbeat: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewRedis(rdb, RedisOptions{Namespace: ns, Heartbeat: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	ls := acquire(t, holder, "k", time.Minute)
	ls.KeepAlive(ctx, nil)
	defer ls.Release(ctx)
	// Tried at every poll until three of the holder's dead-afters (400 ms)
	// have passed and its watchdog has beaten five times (the events: the
	// hash's h field, rewritten by each beat).
	beats := map[string]bool{}
	for start := time.Now(); time.Since(start) < 3*400*time.Millisecond || len(beats) < 5; time.Sleep(10 * time.Millisecond) {
		if _, err := other.TryAcquire(ctx, "k", time.Minute); !errors.Is(err, backend.ErrNotAcquired) {
			t.Fatalf("TryAcquire() against a beating holder after %v = %v, want backend.ErrNotAcquired", time.Since(start), err)
		}
		beats[rdb.HGet(ctx, holder.keys.Lock("k"), "h").Val()] = true
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%d beats in 10s", len(beats))
		}
	}
}

// TestRedisLock_Fence_neverGoesBackwardsWhenRedisLosesKeys grants, loses
// every key (FLUSHALL, a restart without persistence), and grants again.
func TestRedisLock_Fence_neverGoesBackwardsWhenRedisLosesKeys(t *testing.T) {
	s := redistest.Start(t)
	c := s.Client()
	l := newLocker(t, c)
	ctx := testCtx(t)
	losses := []struct {
		name string
		lose func() error
	}{
		{"FLUSHALL", func() error { return c.FlushAll(ctx).Err() }},
		{"restart", s.Restart},
	}
	last := acquire(t, l, "k", time.Minute).Fence()
	for _, loss := range losses {
		if err := loss.lose(); err != nil {
			t.Fatalf("%s: %v", loss.name, err)
		}
		var ls *backend.Lease
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			var err error
			if ls, err = l.TryAcquire(ctx, "k", time.Minute); err == nil || time.Now().After(deadline) {
				if err != nil {
					t.Fatalf("after %s: TryAcquire() = %v", loss.name, err)
				}
				break
			}
		}
		if ls.Fence() <= last {
			t.Fatalf("after %s: fence %d, not above %d granted before", loss.name, ls.Fence(), last)
		}
		if ls.TookOver() {
			t.Fatalf("after %s: the lock was gone, yet the grant reports a take-over", loss.name)
		}
		last = ls.Fence()
	}
}

// plantHolder writes the hash of a holder at key "k" of l that beat just
// now and declares itself dead deadAfter later, without an expiry.
func plantHolder(l *Redis, deadAfter time.Duration) error {
	return rdb.HSet(context.Background(), l.keys.Lock("k"), "t", "forged", "f", 5,
		"h", time.Now().UnixMilli(), "s", deadAfter.Milliseconds()).Err()
}

// TestRedisLock_foreignData_boundedHarm writes data this package did not
// write at the lock and fence keys: every acquire still succeeds at once,
// with a sound fence, and never sets a lock while returning an error.
func TestRedisLock_foreignData_boundedHarm(t *testing.T) {
	tests := []struct {
		name  string
		plant func(l *Redis) error
	}{
		{"lock without expiry", func(l *Redis) error { return rdb.Set(testCtx(t), l.keys.Lock("k"), "someone", 0).Err() }},
		{"lock of the wrong type", func(l *Redis) error { return rdb.RPush(testCtx(t), l.keys.Lock("k"), "x").Err() }},
		{"lock hash without a beat", func(l *Redis) error { return rdb.HSet(testCtx(t), l.keys.Lock("k"), "t", "x").Err() }},
		// A fresh beat, declared dead-afters of two beats and of an hour,
		// and no expiry: no lock this package writes lacks one.
		{"lock hash without expiry", func(l *Redis) error { return plantHolder(l, 2*time.Second) }},
		{"lock hash without expiry, dead an hour after its beat", func(l *Redis) error { return plantHolder(l, time.Hour) }},
		{"fence at 2^63-1", func(l *Redis) error {
			return rdb.Set(testCtx(t), l.keys.Fence("k"), "9223372036854775807", 0).Err()
		}},
		{"fence not a number", func(l *Redis) error { return rdb.Set(testCtx(t), l.keys.Fence("k"), "abc", 0).Err() }},
		{"fence negative", func(l *Redis) error { return rdb.Set(testCtx(t), l.keys.Fence("k"), "-5", 0).Err() }},
		{"fence of the wrong type", func(l *Redis) error { return rdb.HSet(testCtx(t), l.keys.Fence("k"), "x", "y").Err() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLocker(t, rdb)
			ctx := testCtx(t)
			if err := tt.plant(l); err != nil {
				t.Fatal(err)
			}
			ls, err := l.TryAcquire(ctx, "k", time.Minute)
			if err != nil {
				t.Fatalf("TryAcquire() = %v, want a grant", err)
			}
			if f := ls.Fence(); f <= 0 || f > 1<<53 {
				t.Fatalf("fence = %d, want a positive integer below 2^53", f)
			}
			if got := rdb.Get(ctx, l.keys.Fence("k")).Val(); got == "" || got[0] == '-' {
				t.Fatalf("fence counter = %q after the grant", got)
			}
			if pttl := rdb.PTTL(ctx, l.keys.Lock("k")).Val(); pttl <= 0 {
				t.Fatalf("lock PTTL = %v, want the lease", pttl)
			}
			next := acquire(t, l, "other", time.Minute) // the namespace still works
			if err := ls.Release(ctx); err != nil {
				t.Fatalf("Release() = %v", err)
			}
			_ = next.Release(ctx)
			if left := lockKeys(t, rdb, l); len(left) != 0 {
				t.Fatalf("locks left behind: %q", left)
			}
		})
	}
}

func TestRedisLock_TryAcquireOrGet_readsTheValueInTheSameRoundTrip(t *testing.T) {
	l := newLocker(t, rdb)
	ctx := testCtx(t)
	now := time.Now()
	// No value: a grant, no bytes.
	ls, v, fresh, err := l.TryAcquireOrGet(ctx, "k", time.Minute, now)
	if err != nil || ls == nil || v != nil || fresh {
		t.Fatalf("TryAcquireOrGet() on a cold key = %v, %q, %v, %v; want a grant", ls, v, fresh, err)
	}
	// Held, with a stale value stored: not acquired, the bytes come along.
	if err := rdb.HSet(ctx, l.keys.Value("k"), rkey.FieldData, "old", rkey.FieldExpires, now.Add(-time.Second).UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	if got, v, fresh, err := l.TryAcquireOrGet(ctx, "k", time.Minute, now); !errors.Is(err, backend.ErrNotAcquired) || got != nil || string(v) != "old" || fresh {
		t.Fatalf("held, stale value: %v, %q, %v, %v; want backend.ErrNotAcquired with the stale bytes", got, v, fresh, err)
	}
	// A fresh value: returned, lock untouched (still the holder's).
	if err := rdb.HSet(ctx, l.keys.Value("k"), rkey.FieldData, "new", rkey.FieldExpires, now.Add(time.Minute).UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got, v, fresh, err := l.TryAcquireOrGet(ctx, "k", time.Minute, now)
	if err != nil || got != nil || string(v) != "new" || !fresh {
		t.Fatalf("fresh value: %v, %q, %v, %v; want the bytes, fresh, no lease", got, v, fresh, err)
	}
	if left := lockKeys(t, rdb, l); len(left) != 0 {
		t.Fatalf("a read of a fresh value took the lock: %q", left)
	}
}
