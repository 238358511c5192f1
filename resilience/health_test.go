package resilience

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/internal/redistest"
)

func TestHealth_breakersAndSubscription(t *testing.T) {
	srv := redistest.Start(t)
	p := build(t, New[string]("health").Cache(time.Minute).Redis(srv.Client()).Lock(LockSettings{}).
		Breaker(breaker.Settings{Failures: 1, OpenTimeout: time.Minute}).
		RedisOptions(RedisOptions{Breaker: breaker.Settings{Failures: 1, OpenTimeout: time.Minute}}))
	waitFor(t, func() bool { return p.Health().Subscribed })
	h := p.Health()
	if h.Breakers["health"] != breaker.Closed || h.Breakers["redis"] != breaker.Closed || len(h.Breakers) != 2 {
		t.Fatalf("Health() = %+v, want both breakers closed", h)
	}
	ctx := context.Background()
	_, _ = p.Get(ctx, "k", func(context.Context, string) (string, error) { return "", errors.New("down") })
	if got := p.Health().Breakers["health"]; got != breaker.Open {
		t.Fatalf("loader breaker = %v after a failure, want open", got)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	_, _ = p.Get(ctx, "k2", func(context.Context, string) (string, error) { return "v", nil })
	if got := p.Health().Breakers["redis"]; got != breaker.Open {
		t.Fatalf("Redis breaker = %v with Redis down, want open", got)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if p.Health().Subscribed {
		t.Fatal("Subscribed after Close")
	}
}

func TestHealth_embeddedDefault(t *testing.T) {
	p := build(t, New[string]("plain").Cache(time.Minute).Lock(LockSettings{}))
	if h := p.Health(); len(h.Breakers) != 0 || h.Subscribed {
		t.Fatalf("Health() = %+v, want no breakers, not subscribed", h)
	}
}
