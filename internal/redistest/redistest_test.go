package redistest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestServer_killRestart(t *testing.T) {
	s := Start(t)
	c := s.Client(func(o *redis.Options) { o.MaxRetries = -1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if err := s.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING after Kill succeeded")
	}
	addr := s.Addr()
	if err := s.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if s.Addr() != addr {
		t.Fatalf("Restart moved the server from %s to %s", addr, s.Addr())
	}
	// Persistence is off, so the restarted server is empty.
	if err := c.Get(ctx, "k").Err(); err != redis.Nil {
		t.Fatalf("GET after restart: err = %v, want redis.Nil", err)
	}
}

func TestServer_pauseResume(t *testing.T) {
	s := Start(t)
	// short gives up on a paused server soon; patient waits long enough
	// that only a server that never answers would fail it.
	short := s.Client(func(o *redis.Options) {
		o.MaxRetries = -1
		o.ReadTimeout = 200 * time.Millisecond
	})
	patient := s.Client(func(o *redis.Options) {
		o.MaxRetries = -1
		o.ReadTimeout = 30 * time.Second
	})
	ctx := context.Background()
	if err := short.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	if err := s.Pause(); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if err := short.Ping(ctx).Err(); err == nil {
		t.Fatal("PING to a paused server succeeded")
	}
	if err := s.Resume(); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if err := patient.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
}

func TestServer_stop(t *testing.T) {
	s := Start(t)
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := ping(s.Addr()); err == nil {
		t.Fatal("PING after Stop succeeded")
	}
	if !strings.Contains(s.Log(), "Redis") {
		t.Fatalf("log tail does not look like a Redis log:\n%s", s.Log())
	}
}

func TestNew_closeKills(t *testing.T) {
	s, closeFn, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("PING: %v", err)
	}
	closeFn()
	if err := ping(s.Addr()); err == nil {
		t.Fatal("PING after close succeeded")
	}
}

func TestLookPath_missing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, _, err := New()
	if err == nil || !strings.Contains(err.Error(), "test script") {
		t.Fatalf("New() without redis-server: err = %v, want a hint at the test script", err)
	}
}

func TestStartCluster(t *testing.T) {
	c := StartCluster(t, 3)
	if got := len(c.Addrs()); got != 3 {
		t.Fatalf("Addrs() has %d nodes, want 3", got)
	}
	cc := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	seen := map[string]bool{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		if err := cc.Set(ctx, k, k, time.Minute).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		m, err := cc.MasterForKey(ctx, k)
		if err != nil {
			t.Fatalf("MasterForKey(%s): %v", k, err)
		}
		seen[m.Options().Addr] = true
	}
	if len(seen) < 2 {
		t.Fatalf("8 keys landed on %d master(s), want them spread", len(seen))
	}
}
