package remote_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/backend/backendtest"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/internal/rcache/remote"
)

// heard is what a watcher of a namespace heard: "key/origin" per
// announcement.
type heard struct {
	mu  sync.Mutex
	got []string
}

func (h *heard) onWrite(key, origin string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, key+"/"+origin)
}

func (h *heard) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.got, " ")
}

// TestAnnounced_writeAndInvalidate_announce: Write stores at a fence of
// its own and Invalidate stores a tombstone, and each is announced with
// the writer's origin to every view of the namespace.
func TestAnnounced_writeAndInvalidate_announce(t *testing.T) {
	var m backendtest.Memory
	v := openView(t, &m, "ann")
	var h heard
	stop := openView(t, &m, "ann").Watch(h.onWrite, nil)
	defer stop()
	a := remote.NewAnnounced(newRemote(t, v, remote.Options{Namespace: "ann"}), v)
	ctx := context.Background()
	o := rcache.WriteOptions{Origin: "me", Hold: time.Minute}
	f, err := a.Write(ctx, "k", entry("v", 0), o)
	if err != nil || f <= 0 {
		t.Fatalf("Write = %d, %v; want a fence", f, err)
	}
	if e, fr, err := a.Get(ctx, "k"); err != nil || fr != cache.Fresh || e.Value != "v" || e.Fence != f {
		t.Fatalf("Get after Write = %+v, %v, %v; want v at fence %d", e, fr, err, f)
	}
	if got := h.String(); got != "k/me" {
		t.Fatalf("heard %q after Write, want k/me", got)
	}
	f2, err := a.Invalidate(ctx, "k", o)
	if err != nil || f2 <= f {
		t.Fatalf("Invalidate = %d, %v; want a fence above %d", f2, err, f)
	}
	if _, fr, err := a.Get(ctx, "k"); err != nil || fr != cache.Miss {
		t.Fatalf("Get after Invalidate = %v, %v; want a miss", fr, err)
	}
	if got := h.String(); got != "k/me k/me" {
		t.Fatalf("heard %q after Invalidate, want k/me twice", got)
	}
}

// TestAnnounced_announceFails: a write stored but not announced returns
// its fence with an error that says so and wraps the backend's.
func TestAnnounced_announceFails(t *testing.T) {
	var m backendtest.Memory
	v := openView(t, &m, "fail")
	down, err := m.Open(backend.Scope{Namespace: "fail", Heartbeat: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := down.Close(); err != nil {
		t.Fatal(err)
	}
	wantErr := down.Announce(context.Background(), "k", "me")
	if wantErr == nil {
		t.Fatal("a closed view announced")
	}
	a := remote.NewAnnounced(newRemote(t, v, remote.Options{Namespace: "fail"}), down)
	ctx := context.Background()
	o := rcache.WriteOptions{Origin: "me", Hold: time.Minute}
	f, err := a.Write(ctx, "k", entry("v", 0), o)
	if f <= 0 || err == nil || err.Error() != "resilience: announce a write: "+wantErr.Error() || !errors.Is(err, wantErr) {
		t.Fatalf("Write = %d, %v; want its fence and the announcement's failure", f, err)
	}
	if e, _, _ := a.Get(ctx, "k"); e.Value != "v" {
		t.Fatalf("Get = %+v; want the write stored", e)
	}
	f2, err := a.Invalidate(ctx, "k", o)
	if f2 <= f || err == nil || err.Error() != "resilience: announce an invalidation: "+wantErr.Error() {
		t.Fatalf("Invalidate = %d, %v; want its fence and the announcement's failure", f2, err)
	}
}
