package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
)

// Keys may be secrets: no error of the backend's names one, whether the
// context ended, the call was wrong or the database failed.
func TestErrors_nameNoKey(t *testing.T) {
	const key = "secret-7f3a9c"
	f := newFixture(t, Options{})
	s := f.open("ns", 0)
	ctx := testCtx(t)
	if err := f.backend().Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	failing := newFixture(t, Options{Schema: "missing"}).open("ns", 0)
	cases := []struct {
		name string
		run  func() error
	}{
		{"acquire, lease not positive", func() error { _, err := s.TryAcquire(ctx, key, 0); return err }},
		{"acquire, context ended", func() error { _, err := s.TryAcquire(done, key, time.Second); return err }},
		{"inspect, context ended", func() error { _, _, err := s.Inspect(done, key); return err }},
		{"load, context ended", func() error { _, err := s.Load(done, key); return err }},
		{"save, release without a token", func() error {
			_, err := s.Save(ctx, key, []byte("v"), backend.Save{Release: true})
			return err
		}},
		{"acquire, failing database", func() error { _, err := failing.TryAcquire(ctx, key, time.Second); return err }},
		{"load, failing database", func() error { _, err := failing.Load(ctx, key); return err }},
		{"save, failing database", func() error { _, err := failing.Save(ctx, key, []byte("v"), backend.Save{}); return err }},
	}
	for _, tc := range cases {
		err := tc.run()
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if strings.Contains(err.Error(), key) {
			t.Errorf("%s: error %q names the key", tc.name, err)
		}
	}
}
