package rcache

import (
	"errors"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/internal/rkey"
)

var testWrite = WriteOptions{Origin: "12345678", FenceRetention: time.Hour, Hold: 2 * time.Second}

// grant writes a lock hash as package lock's acquire does: token t,
// fence f; with counter, the fence counter too (without: the counter was
// lost, as after a failover).
func grant(t *testing.T, r *Redis[user], key, token string, fence int64, counter bool) {
	t.Helper()
	ctx := testCtx(t)
	if err := rdb.HSet(ctx, r.keys.Lock(key), "t", token, "f", fence).Err(); err != nil {
		t.Fatal(err)
	}
	if !counter {
		return
	}
	if err := rdb.Set(ctx, r.keys.Fence(key), fence, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestWrite_outranksHolderAndUnlockedWrites(t *testing.T) {
	ctx := testCtx(t)
	r := newStore[user](t, RedisOptions{})
	sub := rdb.Subscribe(ctx, r.keys.Channel())
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	// A holder granted a fence far above the clock.
	const holderFence = int64(1) << 52
	grant(t, r, "k", "tok", holderFence, false)

	fence, err := r.Write(ctx, "k", entry(user{Name: "set"}, 0), testWrite)
	if err != nil {
		t.Fatal(err)
	}
	if fence <= holderFence {
		t.Fatalf("Write fence %d, want above the holder's %d", fence, holderFence)
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if kind, origin, key := rkey.ParseAnnouncement(msg.Payload); kind != rkey.KindSet || origin != testWrite.Origin || key != "k" {
		t.Fatalf("announcement %q: kind %q origin %q key %q", msg.Payload, kind, origin, key)
	}
	// The holder's late write-back is refused, and it still releases.
	if stored, err := r.Commit(ctx, "k", entry(user{Name: "old"}, holderFence), "tok"); err != nil || stored {
		t.Fatalf("holder Commit after Write = %v, %v; want refused", stored, err)
	}
	if n := rdb.Exists(ctx, r.keys.Lock("k")).Val(); n != 0 {
		t.Fatal("the refused holder's commit did not release the lock")
	}
	// An unlocked write is refused too.
	if stored, err := r.Set(ctx, "k", entry(user{Name: "unlocked"}, 0)); err != nil || stored {
		t.Fatalf("unlocked Set after Write = %v, %v; want refused", stored, err)
	}
	e, f, err := r.Get(ctx, "k")
	if err != nil || f != Fresh || e.Value.Name != "set" {
		t.Fatalf("Get = %+v, %v, %v; want the written value", e, f, err)
	}
	// A later grant (above the write's fence) writes over it.
	grant(t, r, "k", "tok2", fence+1, true)
	if stored, err := r.setHeld(ctx, "k", entry(user{Name: "newer"}, fence+1), "tok2"); err != nil || !stored {
		t.Fatalf("newer holder setHeld = %v, %v; want stored", stored, err)
	}
}

func TestInvalidate_tombstoneIsMissRevokesLockRefusesOlderWrites(t *testing.T) {
	ctx := testCtx(t)
	r := newStore[user](t, RedisOptions{})
	if _, err := r.Set(ctx, "k", entry(user{Name: "old"}, 0)); err != nil {
		t.Fatal(err)
	}
	const holderFence = int64(1) << 52
	grant(t, r, "k", "tok", holderFence, false)

	fence, err := r.Invalidate(ctx, "k", testWrite)
	if err != nil {
		t.Fatal(err)
	}
	if fence <= holderFence {
		t.Fatalf("tombstone fence %d, want above the holder's %d", fence, holderFence)
	}
	if _, f, err := r.Get(ctx, "k"); err != nil || f != Miss {
		t.Fatalf("Get after Invalidate = %v, %v; want a miss", f, err)
	}
	if n := rdb.Exists(ctx, r.keys.Lock("k")).Val(); n != 0 {
		t.Fatal("Invalidate left the lock")
	}
	if ttl := rdb.PTTL(ctx, r.keys.Value("k")).Val(); ttl <= 0 || ttl > testWrite.Hold {
		t.Fatalf("tombstone TTL %v, want within (0, %v]", ttl, testWrite.Hold)
	}
	// The holder that loaded before: its lock is gone, nothing written.
	if _, err := r.Commit(ctx, "k", entry(user{Name: "old"}, holderFence), "tok"); !errors.Is(err, backend.ErrLockLost) {
		t.Fatalf("holder Commit after Invalidate = %v, want ErrLockLost", err)
	}
	// An unlocked write is refused while the tombstone lives.
	if stored, err := r.Set(ctx, "k", entry(user{Name: "unlocked"}, 0)); err != nil || stored {
		t.Fatalf("unlocked Set after Invalidate = %v, %v; want refused", stored, err)
	}
	// A grant after it (above the tombstone) writes.
	grant(t, r, "k", "tok2", fence+1, true)
	if stored, err := r.setHeld(ctx, "k", entry(user{Name: "new"}, fence+1), "tok2"); err != nil || !stored {
		t.Fatalf("new holder setHeld = %v, %v; want stored", stored, err)
	}
	if e, f, err := r.Get(ctx, "k"); err != nil || f != Fresh || e.Value.Name != "new" {
		t.Fatalf("Get = %+v, %v, %v; want the new value", e, f, err)
	}
	// When the tombstone is gone, an unlocked write lands again.
	if _, err := r.Invalidate(ctx, "k2", WriteOptions{Origin: testWrite.Origin, FenceRetention: time.Hour, Hold: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// The tombstone's Hold runs out now (PEXPIREAT in the past), as it
	// would after a minute.
	if err := rdb.PExpireAt(ctx, r.keys.Value("k2"), time.UnixMilli(1)).Err(); err != nil {
		t.Fatal(err)
	}
	if stored, err := r.Set(ctx, "k2", entry(user{Name: "later"}, 0)); err != nil || !stored {
		t.Fatalf("unlocked Set after the tombstone expired = %v, %v; want stored", stored, err)
	}
}

func TestWrite_badOptions(t *testing.T) {
	ctx := testCtx(t)
	r := newStore[user](t, RedisOptions{})
	for _, o := range []WriteOptions{{}, {Origin: "short", FenceRetention: time.Hour}, {Origin: testWrite.Origin}} {
		if _, err := r.Write(ctx, "k", entry(user{}, 0), o); err == nil {
			t.Errorf("Write with %+v: no error", o)
		}
	}
	if _, err := r.Invalidate(ctx, "k", WriteOptions{Origin: testWrite.Origin, FenceRetention: time.Hour}); err == nil {
		t.Error("Invalidate without a hold: no error")
	}
	old := entry(user{}, 0)
	old.Expires, old.StaleUntil = time.Now().Add(-time.Second), time.Now().Add(-time.Second)
	if _, err := r.Write(ctx, "k", old, testWrite); !errors.Is(err, ErrExpiredEntry) {
		t.Errorf("Write of an expired entry = %v, want ErrExpiredEntry", err)
	}
}
