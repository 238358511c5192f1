package rcache

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"
)

// secretKey is a cache key no error may quote: keys may be secrets.
const secretKey = "secret-7f3a9c"

// TestRedis_errors_nameNoKey fails every operation of a Redis store on a
// key, for each reason it can fail on its own (a cancelled context, an
// expired entry, a value the codec refuses, a missing token or hold), and
// finds the key in none of the errors.
func TestRedis_errors_nameNoKey(t *testing.T) {
	r := newStore[float64](t, RedisOptions{})
	done, cancel := context.WithCancel(context.Background())
	cancel()
	ctx := testCtx(t)
	e := entry(1.0, 0)
	old := entry(1.0, 0)
	old.Expires, old.StaleUntil = time.Now().Add(-time.Second), time.Now().Add(-time.Second)
	nan := entry(math.NaN(), 0)
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"Get, context cancelled", func() error { _, _, err := r.Get(done, secretKey); return err }},
		{"GetMany, context cancelled", func() error { _, err := r.GetMany(done, []string{secretKey}); return err }},
		{"Set, context cancelled", func() error { _, err := r.Set(done, secretKey, e); return err }},
		{"Set, expired entry", func() error { _, err := r.Set(ctx, secretKey, old); return err }},
		{"Set, value the codec refuses", func() error { _, err := r.Set(ctx, secretKey, nan); return err }},
		{"SetMany, context cancelled", func() error {
			_, err := r.SetMany(done, []Write[float64]{{Key: secretKey, Entry: e}})
			return err
		}},
		{"SetMany, expired entry", func() error {
			w, err := r.SetMany(ctx, []Write[float64]{{Key: secretKey, Entry: old}})
			if err == nil && len(w) == 1 {
				err = w[0].Err
			}
			return err
		}},
		{"SetMany, lock lost", func() error {
			w, err := r.SetMany(ctx, []Write[float64]{{Key: secretKey, Entry: e, Token: "not-held"}})
			if err == nil && len(w) == 1 {
				err = w[0].Err
			}
			return err
		}},
		{"Commit, lock lost", func() error { _, err := r.Commit(ctx, secretKey, e, "not-held"); return err }},
		{"Commit, no token", func() error { _, err := r.Commit(ctx, secretKey, e, ""); return err }},
		{"Delete, context cancelled", func() error { return r.Delete(done, secretKey) }},
		{"Write, context cancelled", func() error { _, err := r.Write(done, secretKey, e, testWrite); return err }},
		{"Write, no origin", func() error { _, err := r.Write(ctx, secretKey, e, WriteOptions{}); return err }},
		{"Invalidate, context cancelled", func() error { _, err := r.Invalidate(done, secretKey, testWrite); return err }},
		{"Invalidate, no hold", func() error {
			o := testWrite
			o.Hold = 0
			_, err := r.Invalidate(ctx, secretKey, o)
			return err
		}},
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
