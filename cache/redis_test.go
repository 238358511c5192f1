package cache

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/keyring"
)

func newRedis(t *testing.T, o RedisOptions) *Redis[string] {
	t.Helper()
	if o.Namespace == "" {
		o.Namespace = redistest.Namespace(t)
	}
	r, err := NewRedis[string](rdb, o)
	if err != nil {
		t.Fatalf("NewRedis: %v", err)
	}
	return r
}

func strEntry(v string, ttl time.Duration) Entry[string] {
	now := time.Now()
	return Entry[string]{Value: v, Written: now, Expires: now.Add(ttl), StaleUntil: now.Add(2 * ttl)}
}

func TestNewRedis_invalid(t *testing.T) {
	for _, tt := range []struct {
		name    string
		client  redis.UniversalClient
		o       RedisOptions
		wantErr string
	}{
		{"nil client", nil, RedisOptions{Namespace: "n"}, "client is nil"},
		{"no namespace", rdb, RedisOptions{}, "namespace"},
		{"empty keyring", rdb, RedisOptions{Namespace: "n", Encrypt: &keyring.Ring{}}, "holds no keys"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewRedis[string](tt.client, tt.o)
			if err == nil || r != nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("NewRedis() = %v, %v; want nil, error containing %q", r, err, tt.wantErr)
			}
		})
	}
}

func TestRedis_SetGetDelete(t *testing.T) {
	ctx := redistest.Context(t, 10*time.Second)
	r := newRedis(t, RedisOptions{})
	if _, f, err := r.Get(ctx, "k"); f != Miss || err != nil {
		t.Fatalf("Get of a missing key = %v, %v; want Miss, nil", f, err)
	}
	want := strEntry("ada", time.Minute)
	if stored, err := r.Set(ctx, "k", want); !stored || err != nil {
		t.Fatalf("Set = %v, %v", stored, err)
	}
	got, f, err := r.Get(ctx, "k")
	if err != nil || f != Fresh || got.Value != "ada" || !got.Expires.Equal(want.Expires) || !got.StaleUntil.Equal(want.StaleUntil) {
		t.Fatalf("Get = %+v, %v, %v; want %+v, Fresh", got, f, err, want)
	}
	old := strEntry("old", time.Minute)
	old.Expires, old.StaleUntil = time.Now().Add(-time.Second), time.Now().Add(-time.Second)
	if _, err := r.Set(ctx, "k", old); !errors.Is(err, ErrExpiredEntry) {
		t.Fatalf("Set of an expired entry = %v; want ErrExpiredEntry", err)
	}
	if err := r.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, f, err := r.Get(ctx, "k"); f != Miss || err != nil {
		t.Fatalf("Get after Delete = %v, %v; want Miss, nil", f, err)
	}
}

func TestRedis_Invalidate(t *testing.T) {
	ctx := redistest.Context(t, 10*time.Second)
	r := newRedis(t, RedisOptions{})
	if _, err := r.Set(ctx, "k", strEntry("ada", time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Invalidate(ctx, "k", 0); err == nil {
		t.Fatal("Invalidate without a hold: no error")
	}
	fence, err := r.Invalidate(ctx, "k", time.Minute)
	if err != nil || fence <= 0 {
		t.Fatalf("Invalidate = %d, %v; want a positive fence", fence, err)
	}
	if _, f, err := r.Get(ctx, "k"); f != Miss || err != nil {
		t.Fatalf("Get after Invalidate = %v, %v; want Miss, nil", f, err)
	}
	// An unlocked write loaded before the invalidation does not land on
	// the tombstone's fence.
	if stored, err := r.Set(ctx, "k", strEntry("late", time.Minute)); stored || err != nil {
		t.Fatalf("Set over the tombstone = %v, %v; want false, nil", stored, err)
	}
}

func TestRedis_encrypt(t *testing.T) {
	ctx := redistest.Context(t, 10*time.Second)
	ring, err := keyring.New(keyring.Key{ID: 1, Secret: bytes.Repeat([]byte{7}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	ns := redistest.Namespace(t)
	var reasons []error
	sealed := newRedis(t, RedisOptions{Namespace: ns, Encrypt: ring})
	clear := newRedis(t, RedisOptions{Namespace: ns, OnCorrupt: func(_ string, err error) { reasons = append(reasons, err) }})
	if _, err := sealed.Set(ctx, "k", strEntry("secret", time.Minute)); err != nil {
		t.Fatal(err)
	}
	if e, f, err := sealed.Get(ctx, "k"); f != Fresh || err != nil || e.Value != "secret" {
		t.Fatalf("sealed Get = %+v, %v, %v", e, f, err)
	}
	if _, f, err := clear.Get(ctx, "k"); f != Miss || err != nil || len(reasons) != 1 {
		t.Fatalf("Get without the keyring = %v, %v, reports %v; want a Miss reported once", f, err, reasons)
	}
}
