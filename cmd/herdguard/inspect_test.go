package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/lock"
)

const secret = "s3cret-bytes-of-the-value"

func TestInspect_freshValue(t *testing.T) {
	ctx := context.Background()
	name := redistest.Namespace(t)
	p := newPipeline(t, name)
	if _, err := p.Get(ctx, "k", load(secret, nil)); err != nil {
		t.Fatal(err)
	}
	var r inspectReport
	cliJSON(t, &r, "inspect", "-pipeline", name, "k")
	v := r.Value
	if v.State != stateFresh || v.Fence <= 0 || v.Expires == nil || v.StaleUntil == nil || v.Written == nil || v.Bytes == 0 {
		t.Fatalf("value %+v, want fresh with fence, times and size", v)
	}
	if !v.Expires.After(time.Now()) || v.TTLMillis <= 0 || v.Value != nil {
		t.Fatalf("value %+v", v)
	}
	if r.Lock.Held || r.Lock.TakeOver != "free" {
		t.Fatalf("lock %+v, want free", r.Lock)
	}

	text, _, code := cli(t, "inspect", "-redis", srv.Addr(), "-pipeline", name, "k")
	if code != 0 || !hasRow(text, "value fresh") || !hasRow(text, "lock free") {
		t.Fatalf("exit %d, text:\n%s", code, text)
	}
	jsonOut, _, _ := cli(t, "inspect", "-redis", srv.Addr(), "-json", "-pipeline", name, "k")
	for _, out := range []string{text, jsonOut} {
		if strings.Contains(out, secret) || strings.Contains(out, "s3cret") {
			t.Fatalf("the value's bytes are printed without -show-value:\n%s", out)
		}
	}
	shown, _, _ := cli(t, "inspect", "-redis", srv.Addr(), "-pipeline", name, "-show-value", "k")
	if !strings.Contains(shown, secret) {
		t.Fatalf("-show-value does not show the value:\n%s", shown)
	}
	cliJSON(t, &r, "inspect", "-pipeline", name, "-show-value", "k")
	if r.Value.Value == nil || !strings.Contains(*r.Value.Value, secret) {
		t.Fatalf("-show-value -json: value %v", r.Value.Value)
	}
}

func TestInspect_absentAndNotFound(t *testing.T) {
	ctx := context.Background()
	name := redistest.Namespace(t)
	p := newPipeline(t, name)
	var r inspectReport
	cliJSON(t, &r, "inspect", "-pipeline", name, "k")
	if r.Value.State != stateAbsent || r.Lock.Held {
		t.Fatalf("report %+v, want absent and free", r)
	}
	_, err := p.Get(ctx, "k", func(context.Context, string) (string, error) { return "", cache.ErrNotFound })
	if err == nil {
		t.Fatal("Get of a not-found key: nil error")
	}
	cliJSON(t, &r, "inspect", "-pipeline", name, "k")
	if r.Value.State != stateTombstone || r.Value.Tombstone != "not-found" || r.Value.Fence <= 0 {
		t.Fatalf("value %+v, want a not-found tombstone", r.Value)
	}
}

func TestInspect_tombstoneAfterInvalidate(t *testing.T) {
	ctx := context.Background()
	name := redistest.Namespace(t)
	p := newPipeline(t, name)
	if _, err := p.Get(ctx, "k", load(secret, nil)); err != nil {
		t.Fatal(err)
	}
	var before, after inspectReport
	cliJSON(t, &before, "inspect", "-pipeline", name, "k")
	if err := p.Invalidate(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	cliJSON(t, &after, "inspect", "-pipeline", name, "k")
	v := after.Value
	if v.State != stateTombstone || v.Tombstone != "invalidated" || v.Fence <= before.Value.Fence || v.Bytes != 0 {
		t.Fatalf("value %+v, want an invalidation tombstone above fence %d", v, before.Value.Fence)
	}
	text, _, _ := cli(t, "inspect", "-redis", srv.Addr(), "-pipeline", name, "k")
	if !hasRow(text, "value tombstone (invalidated)") {
		t.Fatalf("text:\n%s", text)
	}
}

// TestInspect_lockAliveThenDead holds two leases with a short heartbeat:
// one kept alive, whose holder is alive, and one whose beat stopped,
// which inspect reports as taken over once past its dead-after, as
// TryAcquire then does.
func TestInspect_lockAliveThenDead(t *testing.T) {
	ctx := context.Background()
	name := redistest.Namespace(t)
	const beat = 200 * time.Millisecond
	lk, err := lock.NewRedis(rdb, lock.RedisOptions{Namespace: name, Heartbeat: beat})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lk.Wait)
	alive, err := lk.TryAcquire(ctx, "alive", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	alive.KeepAlive(ctx, nil)
	t.Cleanup(func() { _ = alive.Release(ctx) })
	stopped, err := lk.TryAcquire(ctx, "stopped", time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	var r inspectReport
	cliJSON(t, &r, "inspect", "-pipeline", name, "alive")
	l := r.Lock
	if !l.Held || l.Foreign || l.Token != alive.Token() || l.Fence != alive.Fence() || l.BeatAgeMs == nil ||
		l.DeadAfter != (2*beat).Milliseconds() || l.PTTLMs <= 0 || l.PTTLMs > time.Minute.Milliseconds() {
		t.Fatalf("lock %+v, want held by token %s with fence %d", l, alive.Token(), alive.Fence())
	}

	eventually(t, "stopped lock reported dead", func() bool {
		cliJSON(t, &r, "inspect", "-pipeline", name, "stopped")
		return r.Lock.TakeOver == "dead"
	})
	if !r.Lock.WouldTakeOver() || *r.Lock.BeatAgeMs <= r.Lock.DeadAfter || r.Lock.Token != stopped.Token() {
		t.Fatalf("lock %+v", r.Lock)
	}
	text, _, _ := cli(t, "inspect", "-redis", srv.Addr(), "-pipeline", name, "stopped")
	if !hasRow(text, "take over yes: the holder's beat is past its dead-after") {
		t.Fatalf("text:\n%s", text)
	}
	next, err := lk.TryAcquire(ctx, "stopped", time.Minute)
	if err != nil || !next.TookOver() {
		t.Fatalf("TryAcquire after inspect said dead: %v, took over %v", err, err == nil && next.TookOver())
	}
	_ = next.Release(ctx)

	// The kept-alive holder has beaten meanwhile, past its first dead-after.
	cliJSON(t, &r, "inspect", "-pipeline", name, "alive")
	if r.Lock.TakeOver != "no" || *r.Lock.BeatAgeMs > r.Lock.DeadAfter {
		t.Fatalf("kept-alive lock %+v, want a live holder", r.Lock)
	}
	text, _, _ = cli(t, "inspect", "-redis", srv.Addr(), "-pipeline", name, "alive")
	if !hasRow(text, "take over no: the holder is alive") || !strings.Contains(text, alive.Token()) {
		t.Fatalf("text:\n%s", text)
	}
}

// TestInspect_foreignLock: a lock key this library did not write (another
// type, or a lock hash without an expiry) is one TryAcquire takes over.
func TestInspect_foreignLock(t *testing.T) {
	ctx := context.Background()
	name := redistest.Namespace(t)
	keys := mustKeys(t, name)
	if err := rdb.Set(ctx, keys.Lock("string"), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	if err := rdb.HSet(ctx, keys.Lock("no-expiry"), rkey.LockToken, "tok", rkey.LockFence, "7",
		rkey.LockBeat, now, rkey.LockDeadAfter, 3_600_000).Err(); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"string", "no-expiry"} {
		var r inspectReport
		cliJSON(t, &r, "inspect", "-pipeline", name, key)
		if !r.Lock.Held || !r.Lock.Foreign || r.Lock.TakeOver != "foreign" {
			t.Fatalf("lock of %s: %+v, want foreign", key, r.Lock)
		}
	}
}
