package file

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
)

// Keys may be secrets: no error of the backend's names one.
func TestErrors_nameNoKey(t *testing.T) {
	const key = "secret-7f3a9c"
	s := openTest(t, "", "errs", 0)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	held, err := s.TryAcquire(context.Background(), key+"-held", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(context.Background()) }()
	cases := []struct {
		name string
		run  func() error
	}{
		{"acquire, lease not positive", func() error { _, err := s.TryAcquire(context.Background(), key, 0); return err }},
		{"acquire, context ended", func() error { _, err := s.TryAcquire(canceled, key, time.Minute); return err }},
		{"save, negative fence", func() error {
			_, err := s.Save(context.Background(), key, []byte("v"), backend.Save{Fence: -1})
			return err
		}},
		{"save, lock lost", func() error {
			_, err := s.Save(context.Background(), key+"-held", []byte("v"), backend.Save{Token: "not-the-holder", Fence: held.Fence()})
			return err
		}},
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
