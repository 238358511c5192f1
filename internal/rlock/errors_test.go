package rlock

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
)

// secretKey is a locked key no error may quote: keys may be secrets.
const secretKey = "secret-7f3a9c"

// TestErrors_nameNoKey fails every operation of the Redis and in-process
// lockers on a key, for each reason it can fail on its own (a cancelled
// context, a lease that is not positive), and finds the key in none of
// the errors.
func TestErrors_nameNoKey(t *testing.T) {
	r := newLocker(t, rdb)
	ctx := testCtx(t)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	held := acquire(t, r, secretKey, time.Minute)
	// The cancelled Release below marks the lease released: the lock
	// itself is deleted here.
	defer rdb.Del(ctx, r.keys.Lock(secretKey))
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"TryAcquire, context cancelled", func() error { _, err := r.TryAcquire(done, secretKey, time.Minute); return err }},
		{"TryAcquire, no lease", func() error { _, err := r.TryAcquire(ctx, secretKey, 0); return err }},
		{"TryAcquireOrGet, context cancelled", func() error {
			_, _, _, err := r.TryAcquireOrGet(done, secretKey, time.Minute, time.Now())
			return err
		}},
		{"TryAcquireOrGetMany, context cancelled", func() error {
			return r.TryAcquireOrGetMany(done, []string{secretKey}, time.Minute, time.Now())[0].Err
		}},
		{"Inspect, context cancelled", func() error { _, _, err := r.Inspect(done, secretKey); return err }},
		{"Extend, context cancelled", func() error { return held.Extend(done, time.Minute) }},
		{"Extend, no lease", func() error { return held.Extend(ctx, 0) }},
		{"ExtendMany, context cancelled", func() error { _, err := r.ExtendMany(done, []*backend.Lease{held}); return err }},
		{"Release, context cancelled", func() error { return held.Release(done) }},
	} {
		err := tc.call()
		switch {
		case err == nil:
			t.Errorf("%s: no error", tc.name)
		case strings.Contains(err.Error(), secretKey):
			t.Errorf("%s: error %q names the key", tc.name, err)
		}
	}
}
