package crosspod_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/lock"
)

// foreignSpec is the pod's configuration in the foreign-data tests: a
// small MaxWait and a short Redis breaker, so that "no key stalls longer
// than MaxWait" and "none is disabled longer than the breaker's open time"
// are quick to check.
var foreignSpec = podSpec{
	Lock:        lockConfig{Lease: 5 * time.Second, MaxWait: time.Second, Heartbeat: 200 * time.Millisecond},
	BreakerOpen: time.Second,
}

// slack absorbs scheduling on a loaded two-core machine under -race: it is
// margin, not a performance claim.
const slack = 3 * time.Second

// TestForeignData_noStallNoLockLeft checks keys whose lock or fence holds
// data the lock did not write: a lock set by hand without expiry, a fence
// at 2^63-1 or not a number, a lock or fence of the wrong Redis type.
// A call on the key returns within MaxWait; within the Redis breaker's
// open time, calls on the key load under the lock again without failing
// open, and the key's lock can be taken; and no lock is left set after
// a call or a failed acquire.
func TestForeignData_noStallNoLockLeft(t *testing.T) {
	srv, admin := startRedis(t)
	for _, tc := range []struct {
		name  string
		plant func(ctx context.Context, c *redis.Client, ks rkey.Space, key string) error
	}{
		{"lock-without-expiry", func(ctx context.Context, c *redis.Client, ks rkey.Space, key string) error {
			return c.Set(ctx, ks.Lock(key), "set-by-hand", 0).Err()
		}},
		{"fence-max-int64", func(ctx context.Context, c *redis.Client, ks rkey.Space, key string) error {
			return c.Set(ctx, ks.Fence(key), "9223372036854775807", 0).Err()
		}},
		{"fence-not-a-number", func(ctx context.Context, c *redis.Client, ks rkey.Space, key string) error {
			return c.Set(ctx, ks.Fence(key), "abc", 0).Err()
		}},
		{"lock-list", func(ctx context.Context, c *redis.Client, ks rkey.Space, key string) error {
			return c.RPush(ctx, ks.Lock(key), "x").Err()
		}},
		{"fence-hash", func(ctx context.Context, c *redis.Client, ks rkey.Space, key string) error {
			return c.HSet(ctx, ks.Fence(key), "a", "b").Err()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testForeign(t, tc.name, srv.Addr(), admin, tc.plant)
		})
	}
}

func testForeign(t *testing.T, caseName, addr string, admin *redis.Client, plant func(context.Context, *redis.Client, rkey.Space, string) error) {
	const key = "k"
	name := newName("foreign")
	f := startFleet(t, name, target{Addr: addr}, foreignSpec)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ks := f.keys()
	if err := plant(ctx, admin, ks, key); err != nil {
		t.Fatal(err)
	}
	planted := dump(ctx, admin, ks.Lock(key))
	maxWait := foreignSpec.Lock.MaxWait

	c := f.get(0, key, 4, sleeping(20*time.Millisecond))
	first := tallyOf(f.results(c, resultBound))
	firstDone := time.Now()
	took := firstDone.Sub(c.sent)
	if first.errCount > 0 {
		t.Errorf("first call: %v", first)
	}
	if took > maxWait+slack {
		t.Errorf("first call took %v: longer than MaxWait (%v) plus %v", took.Round(time.Millisecond), maxWait, slack)
	}
	checkNoLockLeft(ctx, t, f, admin, key, planted, "after the first call")

	// Within the Redis breaker's open time, the key works as any other.
	deadline := firstDone.Add(foreignSpec.BreakerOpen + slack)
	var last string
	for n := 0; ; n++ {
		if err := f.invalidate(0, key); err != nil {
			last = "invalidate: " + err.Error()
		} else {
			c := f.get(0, key, 1, sleeping(20*time.Millisecond))
			r := f.results(c, resultBound)[0]
			lockErr := tryLock(ctx, admin, f.name, key)
			if lockErr != nil && !errors.Is(lockErr, backend.ErrNotAcquired) {
				checkNoLockLeft(ctx, t, f, admin, key, planted, "after an acquire that failed with "+lockErr.Error())
			}
			if r.Err == "" && !r.FailedOpen && r.Source == "loader" && lockErr == nil && r.Latency <= maxWait+slack {
				t.Logf("FIGURES foreign data (%s): first call %v; the key loads under the lock again %v after it (%d tries)",
					caseName, took.Round(time.Millisecond), time.Since(firstDone).Round(time.Millisecond), n+1)
				break
			}
			last = describeCall(r, lockErr)
		}
		if time.Now().After(deadline) {
			t.Errorf("the key still does not work %v after the first call (the Redis breaker opens for %v): last call %s; script errors %v",
				time.Since(firstDone).Round(time.Millisecond), foreignSpec.BreakerOpen, last, f.scriptErrors(0, key))
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	checkNoLockLeft(ctx, t, f, admin, key, planted, "after the last call")
}

// tryLock takes key's lock straight through package lock and releases it.
func tryLock(ctx context.Context, c *redis.Client, name, key string) error {
	lk, err := lock.NewRedis(c, lock.RedisOptions{Namespace: name})
	if err != nil {
		return err
	}
	defer lk.Wait()
	l, err := lk.TryAcquire(ctx, key, time.Second)
	if err != nil {
		return err
	}
	return l.Release(ctx)
}

// checkNoLockLeft fails t unless key's lock key is gone or still holds
// what was planted, within a moment: no call or failed acquire leaves a
// lock of its own behind.
func checkNoLockLeft(ctx context.Context, t *testing.T, f *fleet, c *redis.Client, key, planted, when string) {
	t.Helper()
	lk := f.keys().Lock(key)
	var now string
	for end := time.Now().Add(2 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if now = dump(ctx, c, lk); now == "" || now == planted {
			return
		}
		if time.Now().After(end) {
			break
		}
	}
	typ := c.Type(ctx, lk).Val()
	t.Errorf("%s: a lock is left at %s (type %s, expires in %v); script errors %v",
		when, lk, typ, c.PTTL(ctx, lk).Val(), f.scriptErrors(0, key))
}

// dump returns key's serialized value, "" when it does not exist.
func dump(ctx context.Context, c *redis.Client, key string) string {
	s, err := c.Dump(ctx, key).Result()
	if err != nil {
		return ""
	}
	return s
}

func describeCall(r callResult, lockErr error) string {
	s := "source " + r.Source + ", latency " + r.Latency.Round(time.Millisecond).String()
	if r.FailedOpen {
		s += ", failed open"
	}
	if r.Err != "" {
		s += ", error " + r.Err
	}
	if lockErr != nil {
		s += ", lock: " + lockErr.Error()
	} else {
		s += ", lock: acquired"
	}
	return s
}
