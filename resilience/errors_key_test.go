package resilience_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/backend/backendtest"
	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/resilience"
)

// secretKey is a cache key no error may quote: keys may be secrets.
const secretKey = "secret-7f3a9c"

// TestErrors_nameNoKey fails Set and Invalidate on a key, with Redis
// killed and over a backend that cannot announce, and finds the key in
// none of the errors.
func TestErrors_nameNoKey(t *testing.T) {
	srv := redistest.Start(t)
	viaRedis, err := resilience.New[string]("keys-redis").Cache(time.Minute).Redis(srv.Client()).
		Lock(resilience.LockSettings{}).Build()
	if err != nil {
		t.Fatal(err)
	}
	defer viaRedis.Close()
	viaBackend, err := resilience.New[string]("keys-backend").Cache(time.Minute).
		Backend(silentBackend{&backendtest.Memory{}}).Build()
	if err != nil {
		t.Fatal(err)
	}
	defer viaBackend.Close()
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for name, p := range map[string]*resilience.Pipeline[string]{"Redis killed": viaRedis, "backend cannot announce": viaBackend} {
		for op, call := range map[string]func() error{
			"Set":        func() error { return p.Set(ctx, secretKey, "v") },
			"Invalidate": func() error { return p.Invalidate(ctx, secretKey) },
		} {
			err := call()
			switch {
			case err == nil:
				t.Errorf("%s, %s: no error", name, op)
			case strings.Contains(err.Error(), secretKey):
				t.Errorf("%s, %s: error %q names the key", name, op, err)
			}
		}
	}
}

// silentBackend is a backend whose announcements fail.
type silentBackend struct{ *backendtest.Memory }

func (b silentBackend) Open(s backend.Scope) (backend.Shared, error) {
	sh, err := b.Memory.Open(s)
	return silentShared{sh}, err
}

type silentShared struct{ backend.Shared }

func (silentShared) Announce(context.Context, string, string) error {
	return errors.New("announcement refused")
}
