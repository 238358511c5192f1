package coord

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/backend/backendtest"
	"github.com/herdguard/herdguard/internal/redistest"
)

// TestCheckRedis: a user that may do what the pipeline sends passes; one
// that may not publish passes without the lock and, with it, is a
// finding that names Redis and what is missing; a Redis that does not
// answer is a finding with the client's error.
func TestCheckRedis(t *testing.T) {
	srv := redistest.Start(t)
	ctx := redistest.Context(t, 30*time.Second)
	if f := checkRedis(srv.Client(), "hg:", "chk", true)(ctx); f != nil {
		t.Fatalf("the default user: %+v, want nil", f)
	}
	if err := srv.Client().Do(ctx, "ACL", "SETUSER", "nopub", "reset", "on", ">pw", "~*", "&*", "+@all", "-publish").Err(); err != nil {
		t.Fatal(err)
	}
	nopub := srv.Client(func(o *redis.Options) { o.Username, o.Password, o.MaxRetries = "nopub", "pw", -1 })
	if f := checkRedis(nopub, "hg:", "chk", false)(ctx); f != nil {
		t.Fatalf("no PUBLISH, no lock: %+v, want nil", f)
	}
	f := checkRedis(nopub, "hg:", "chk", true)(ctx)
	if want := []string{"PUBLISH on the announcement channel"}; f == nil || f.Backend != RedisName || !slices.Equal(f.Missing, want) {
		t.Fatalf("no PUBLISH, with the lock: %+v, want Redis and missing %q", f, want)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	f = checkRedis(nopub, "hg:", "chk", false)(ctx)
	if f == nil || f.Backend != RedisName || !strings.Contains(f.Problem, "does not answer") || f.Err == nil {
		t.Fatalf("Redis down: %+v, want Redis, does not answer, and the client's error", f)
	}
}

// plainView is a backend's view without a System method.
type plainView struct{ backend.Shared }

// TestCheckBackend: a view that answers its Ping passes; one that does
// not is a finding with its error, named by its System name, or
// "backend" without one.
func TestCheckBackend(t *testing.T) {
	var m backendtest.Memory
	for _, tc := range []struct {
		name string
		view func(backend.Shared) backend.Shared
		want string
	}{
		{"with System", func(v backend.Shared) backend.Shared { return v }, "memory"},
		{"without System", func(v backend.Shared) backend.Shared { return plainView{v} }, "backend"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := m.Open(backend.Scope{Namespace: "chk", Heartbeat: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			check := checkBackend(tc.view(v))
			ctx := context.Background()
			if f := check(ctx); f != nil {
				t.Fatalf("a view that answers: %+v, want nil", f)
			}
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			pingErr := v.Ping(ctx)
			f := check(ctx)
			if f == nil || f.Backend != tc.want || f.Problem != "the backend does not answer" || !errors.Is(f.Err, pingErr) || len(f.Missing) != 0 {
				t.Fatalf("a closed view: %+v, want %s, does not answer, %v", f, tc.want, pingErr)
			}
		})
	}
}
