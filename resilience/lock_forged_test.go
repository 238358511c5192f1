package resilience

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/rkey"
)

// TestLock_forgedLock_delaysCallersAtMostALease writes lock hashes this
// package did not write at a cold key's lock: a fresh beat with a declared
// dead-after of an hour, with no expiry or with an expiry of a lease. A
// Get with Lock (default settings, but for a short Lease, which leaves
// MaxWait at its 30 s default) loads under a grant of its own: at once
// when the hash has no expiry (no lock of this package has none), and
// within about a lease when it has one (the lease its writer set bounds
// whatever it declares), never after MaxWait.
func TestLock_forgedLock_delaysCallersAtMostALease(t *testing.T) {
	const lease = 2 * time.Second
	srv := redistest.Start(t)
	admin := srv.Client()
	for _, tc := range []struct {
		name   string
		expiry time.Duration // 0: none
		within time.Duration
	}{
		{"no expiry", 0, lease / 2},
		// A waiter sees the expiry at its next poll: up to the poll's
		// longest interval, a second, jittered by half, later (and margin).
		{"expiry of a lease", lease, lease + 3*time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "forged-" + strconv.Itoa(int(tc.expiry/time.Millisecond))
			p := build(t, New[string](name).Cache(time.Minute).SingleFlight().
				Redis(srv.Client()).Lock(LockSettings{Lease: lease}))
			if got := p.lockCfg.MaxWait; got != DefaultLockMaxWait {
				t.Fatalf("MaxWait = %v, want the default %v", got, DefaultLockMaxWait)
			}
			ks, err := rkey.New(DefaultPrefix, name)
			if err != nil {
				t.Fatal(err)
			}
			// The call's own bound: the longest the fix allows, plus the
			// same again, well short of MaxWait.
			ctx, cancel := context.WithTimeout(context.Background(), 2*tc.within)
			defer cancel()
			const forgedFence = 5
			if err := admin.HSet(ctx, ks.Lock("k"), "t", "forged", "f", forgedFence,
				"h", time.Now().UnixMilli(), "s", time.Hour.Milliseconds()).Err(); err != nil {
				t.Fatal(err)
			}
			if tc.expiry > 0 {
				if err := admin.PExpire(ctx, ks.Lock("k"), tc.expiry).Err(); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			r, err := p.GetResult(ctx, "k", func(context.Context, string) (string, error) { return "v", nil })
			took := time.Since(start)
			if err != nil || r.Source != SourceLoader || r.FailedOpen || r.Value != "v" {
				t.Fatalf("Get after %v = %+v, %v; want the loader's value, not failed open", took.Round(time.Millisecond), r, err)
			}
			if took > tc.within {
				t.Fatalf("Get took %v behind the forged lock, want at most %v", took.Round(time.Millisecond), tc.within)
			}
			// Loaded under a grant: the write-back carries a fence above
			// the forged one (an unlocked load's carries none).
			f, err := admin.HGet(ctx, ks.Value("k"), rkey.FieldFence).Int64()
			if err != nil || f <= forgedFence {
				t.Fatalf("stored fence = %d, %v; want a grant's, above %d", f, err, forgedFence)
			}
			t.Logf("loaded under a grant (fence %d) %v after the first look", f, took.Round(time.Millisecond))
		})
	}
}
