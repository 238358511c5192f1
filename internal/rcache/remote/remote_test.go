package remote_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/backend/backendtest"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/internal/rcache/remote"
	"github.com/herdguard/herdguard/keyring"
)

func openView(t *testing.T, m *backendtest.Memory, ns string) backend.Shared {
	t.Helper()
	v, err := m.Open(backend.Scope{Namespace: ns, Heartbeat: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	return v
}

func newRemote(t *testing.T, s backend.Store, o remote.Options) *remote.Remote[string] {
	t.Helper()
	r, err := remote.New[string](s, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func entry(v string, fence int64) rcache.Entry[string] {
	now := time.Now()
	return rcache.Entry[string]{Value: v, Written: now, Expires: now.Add(time.Minute), StaleUntil: now.Add(2 * time.Minute), Fence: fence}
}

func TestRemote_roundTripAndFences(t *testing.T) {
	var m backendtest.Memory
	v := openView(t, &m, "rt")
	r := newRemote(t, v, remote.Options{Namespace: "rt"})
	ctx := context.Background()
	if ok, err := r.Set(ctx, "k", entry("a", 0)); !ok || err != nil {
		t.Fatalf("Set = %v, %v", ok, err)
	}
	e, f, err := r.Get(ctx, "k")
	if err != nil || f != cache.Fresh || e.Value != "a" {
		t.Fatalf("Get = %+v, %v, %v", e, f, err)
	}
	// A holder that loaded before a Write is refused by its fence, and
	// its commit releases the lock all the same.
	l, err := v.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	wf, err := r.Write(ctx, "k", entry("written", 0))
	if err != nil || wf <= l.Fence() {
		t.Fatalf("Write = %d, %v; want a fence above the grant's %d", wf, err, l.Fence())
	}
	if ok, err := r.Commit(ctx, "k", entry("late", l.Fence()), l.Token()); ok || err != nil {
		t.Fatalf("Commit below the written fence = %v, %v; want refused", ok, err)
	}
	if _, err := v.TryAcquire(ctx, "k", time.Minute); err != nil {
		t.Fatalf("the refused commit did not release the lock: %v", err)
	}
	if e, _, _ := r.Get(ctx, "k"); e.Value != "written" || e.Fence != wf {
		t.Fatalf("Get = %+v, want the write at fence %d", e, wf)
	}
	if _, err := r.Set(ctx, "k", entry("x", 0)); err != nil {
		t.Fatal(err)
	}
	if e, _, _ := r.Get(ctx, "k"); e.Value != "written" {
		t.Fatalf("an unfenced Set replaced a fenced write: %+v", e)
	}
}

func TestRemote_invalidate(t *testing.T) {
	var m backendtest.Memory
	v := openView(t, &m, "inv")
	r := newRemote(t, v, remote.Options{Namespace: "inv"})
	ctx := context.Background()
	l, err := v.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Set(ctx, "k", entry("old", 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Invalidate(ctx, "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, f, err := r.Get(ctx, "k"); f != cache.Miss || err != nil {
		t.Fatalf("Get after Invalidate = %v, %v; want a miss", f, err)
	}
	if _, err := r.Commit(ctx, "k", entry("held", l.Fence()), l.Token()); !errors.Is(err, backend.ErrLockLost) {
		t.Fatalf("Commit of a revoked holder = %v, want ErrLockLost", err)
	}
	if ok, _ := r.Set(ctx, "k", entry("unlocked", 0)); ok {
		t.Fatal("an unlocked write went over the tombstone")
	}
	if r.Corrupted() != 0 {
		t.Fatalf("the tombstone counted as corrupt: %d", r.Corrupted())
	}
}

func TestRemote_sealedBoundToNamespaceAndKey(t *testing.T) {
	var m backendtest.Memory
	v := openView(t, &m, "sealed")
	ring, err := keyring.New(keyring.Key{ID: 1, Secret: bytes.Repeat([]byte{7}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []error
	r := newRemote(t, v, remote.Options{Namespace: "sealed", Encrypt: ring, OnCorrupt: func(_ string, err error) { reasons = append(reasons, err) }})
	other := newRemote(t, v, remote.Options{Namespace: "other", Encrypt: ring})
	ctx := context.Background()
	if _, err := r.Set(ctx, "a", entry("secret-value", 0)); err != nil {
		t.Fatal(err)
	}
	raw, err := v.Load(ctx, "a")
	if err != nil || bytes.Contains(raw, []byte("secret-value")) {
		t.Fatalf("stored bytes %q (%v) show the value", raw, err)
	}
	if e, f, _ := r.Get(ctx, "a"); f != cache.Fresh || e.Value != "secret-value" {
		t.Fatalf("Get = %+v, %v", e, f)
	}
	// Moved to another key, or read as another namespace's: no value.
	if _, err := v.Save(ctx, "b", raw, backend.Save{Until: time.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if _, f, err := r.Get(ctx, "b"); f != cache.Miss || err != nil {
		t.Fatalf("bytes moved to another key: %v, %v; want a miss", f, err)
	}
	if _, f, _ := other.Get(ctx, "a"); f != cache.Miss {
		t.Fatalf("another namespace opened the value: %v", f)
	}
	if r.Corrupted() != 1 || len(reasons) != 1 || !errors.Is(reasons[0], keyring.ErrDecrypt) {
		t.Fatalf("corrupt reads: %d, %v; want one ErrDecrypt", r.Corrupted(), reasons)
	}
	if _, err := remote.New[string](v, remote.Options{}); err == nil {
		t.Fatal("New accepted an empty namespace")
	}
}
