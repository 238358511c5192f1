package resilience_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/backend/backendtest"
	"github.com/herdguard/herdguard/resilience"
)

// staleBeats is a backend that counts the extensions of leases it no
// longer holds: a watchdog still beating for a lease already given back.
type staleBeats struct {
	m     backendtest.Memory
	stale atomic.Int64
}

func (b *staleBeats) Open(s backend.Scope) (backend.Shared, error) {
	v, err := b.m.Open(s)
	if err != nil {
		return nil, err
	}
	return &staleBeatsView{Shared: v, b: b}, nil
}

type staleBeatsView struct {
	backend.Shared
	b *staleBeats
}

func (v *staleBeatsView) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*backend.Lease, error) {
	l, err := v.Shared.TryAcquire(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return backend.NewLease(v, backend.Grant{Key: l.Key(), Token: l.Token(), Fence: l.Fence(), TTL: l.TTL(), Heartbeat: l.Every(), TookOver: l.TookOver()}), nil
}

func (v *staleBeatsView) Extend(ctx context.Context, key, token string, ttl time.Duration) error {
	err := v.Shared.(backend.Holder).Extend(ctx, key, token, ttl)
	if errors.Is(err, backend.ErrNotHeld) {
		v.b.stale.Add(1)
	}
	return err
}

func (v *staleBeatsView) Release(ctx context.Context, key, token string) error {
	return v.Shared.(backend.Holder).Release(ctx, key, token)
}

// TestAwait_winnerKeepsTheLooksWatchdog: a waiter whose look wins the
// lock (the holder gave it back with no value) loads under the watchdog
// that beats since the grant, and ends it with the write-back: no second
// watchdog goes on beating for the lease once it is given back.
func TestAwait_winnerKeepsTheLooksWatchdog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const beat = 20 * time.Millisecond
		b := &staleBeats{}
		p := buildOver(t, resilience.New[string]("beats").Cache(time.Minute).
			Lock(resilience.LockSettings{Heartbeat: beat, Poll: 10 * time.Millisecond}).
			Backend(b))
		ctx := context.Background()
		other, err := b.m.Open(backend.Scope{Namespace: "beats", Heartbeat: beat})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		held, err := other.TryAcquire(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		var r resilience.Result[string]
		go func() {
			var err error
			r, err = p.GetResult(ctx, "k", func(context.Context, string) (string, error) { return "v", nil })
			done <- err
		}()
		synctest.Wait() // the call waits for the holder
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil || r.Value != "v" || r.Source != resilience.SourceLoader {
			t.Fatalf("GetResult = %+v, %v; want v from the loader", r, err)
		}
		// Every watchdog still running beats within a few beats.
		time.Sleep(10 * beat)
		synctest.Wait()
		if n := b.stale.Load(); n != 0 {
			t.Errorf("%d extensions of a lease already given back; want none", n)
		}
	})
}
