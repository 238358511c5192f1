package rcache

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/internal/rlock"
	"github.com/herdguard/herdguard/keyring"
)

// secret returns an n-byte AES key made of the digits of seed, so that a
// leak is easy to spot in text.
func secret(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = '0' + (seed+byte(i))%10
	}
	return b
}

func mustKeyring(t testing.TB, primary keyring.Key, others ...keyring.Key) *keyring.Ring {
	t.Helper()
	r, err := keyring.New(primary, others...)
	if err != nil {
		t.Fatalf("NewKeyring: %v", err)
	}
	return r
}

// leaks returns the forms in which s could show in text.
func leaks(s []byte) []string {
	return []string{string(s), hex.EncodeToString(s), strings.ToUpper(hex.EncodeToString(s)),
		base64.StdEncoding.EncodeToString(s), base64.RawURLEncoding.EncodeToString(s),
		strings.Trim(fmt.Sprint(s), "[]")}
}

func assertNoLeak(t *testing.T, what, text string, secrets ...[]byte) {
	t.Helper()
	for _, s := range secrets {
		if len(s) < 8 {
			continue // too short to spot
		}
		for _, form := range leaks(s) {
			if strings.Contains(text, form) {
				t.Fatalf("%s shows a secret (%q): %s", what, form, text)
			}
		}
	}
}

// The seal's layout (package keyring): its magic byte, its overhead and
// its tag's length.
const (
	sealMagic    = 0xE5
	sealOverhead = 34
	sealTag      = 16
)

// newSealedStore is newStore with a keyring.
func newSealedStore[V any](t *testing.T, ns string, ring *keyring.Ring, onCorrupt func(string, error)) *Redis[V] {
	t.Helper()
	return newStore[V](t, RedisOptions{Namespace: ns, Encrypt: ring, OnCorrupt: onCorrupt})
}

// corruptions records what OnCorrupt is told.
type corruptions struct {
	mu   sync.Mutex
	keys []string
	errs []error
}

func (c *corruptions) record(key string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys, c.errs = append(c.keys, key), append(c.errs, err)
}

// last returns the last report, failing t unless there are want in all.
func (c *corruptions) last(t *testing.T, want int) (string, error) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.keys) != want {
		t.Fatalf("OnCorrupt heard %d reports (%v), want %d", len(c.keys), c.errs, want)
	}
	return c.keys[want-1], c.errs[want-1]
}

func TestNewRedis_zeroKeyring(t *testing.T) {
	r, err := NewRedis[string](rdb, RedisOptions{Namespace: "n", Encrypt: &keyring.Ring{}})
	if err == nil || r != nil || !strings.Contains(err.Error(), "build it with keyring.New") {
		t.Fatalf("NewRedis() = %v, %v; want an error about the keyring", r, err)
	}
}

func TestRedis_encrypt_roundTripAndWhatRedisHolds(t *testing.T) {
	ring := mustKeyring(t, keyring.Key{ID: 3, Secret: secret(3, 32)})
	r := newSealedStore[user](t, namespace(t), ring, nil)
	ctx := testCtx(t)
	now := time.Now()
	tests := []struct {
		name  string
		e     Entry[user]
		wantF Freshness
	}{
		{"fresh value", entry(user{ID: 1, Name: "ada lovelace"}, 3), Fresh},
		{"zero value", entry(user{}, 0), Fresh},
		{"not found", Entry[user]{NotFound: true, Written: now, Expires: now.Add(time.Minute), StaleUntil: now.Add(time.Minute), Fence: 4}, Fresh},
		{"stale value", Entry[user]{Value: user{ID: 2, Name: "grace hopper"}, Written: now.Add(-time.Hour), Expires: now.Add(-time.Second), StaleUntil: now.Add(time.Minute), Fence: 9}, Stale},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if stored, err := r.Set(ctx, tt.name, tt.e); err != nil || !stored {
				t.Fatalf("Set() = %v, %v", stored, err)
			}
			got, f, err := r.Get(ctx, tt.name)
			if err != nil || f != tt.wantF || got.Value != tt.e.Value || got.NotFound != tt.e.NotFound ||
				got.Fence != tt.e.Fence || !got.Written.Equal(tt.e.Written) || !got.Expires.Equal(tt.e.Expires) ||
				!got.StaleUntil.Equal(tt.e.StaleUntil) || got.LoadDuration != tt.e.LoadDuration {
				t.Fatalf("Get() = %+v, %v, %v; want %+v, %v", got, f, err, tt.e, tt.wantF)
			}
			h, err := rdb.HGetAll(ctx, r.keys.Value(tt.name)).Result()
			if err != nil {
				t.Fatal(err)
			}
			// The data field is sealed; the fields the scripts read are not.
			d := []byte(h[rkey.FieldData])
			if d[0] != sealMagic || bytes.Contains(d, []byte("ada")) || bytes.Contains(d, []byte("grace")) {
				t.Fatalf("data field %x is not sealed", d)
			}
			if _, err := decodeEnvelope(d); err == nil {
				t.Fatal("the data field decodes as a clear envelope")
			}
			if h[rkey.FieldFence] != strconv.FormatInt(tt.e.Fence, 10) || h[rkey.FieldExpires] != strconv.FormatInt(tt.e.Expires.UnixMilli(), 10) || len(h) != 3 {
				t.Fatalf("hash %q: want fence %d and expiry %d in clear", h, tt.e.Fence, tt.e.Expires.UnixMilli())
			}
		})
	}
	if r.Corrupted() != 0 {
		t.Fatalf("Corrupted() = %d", r.Corrupted())
	}
}

// TestRedis_encrypt_movedBytesDoNotOpen copies a sealed value, with Redis's
// own commands, to another key: a miss and a report, never the value.
func TestRedis_encrypt_movedBytesDoNotOpen(t *testing.T) {
	ring := mustKeyring(t, keyring.Key{ID: 1, Secret: secret(1, 32)})
	ctx := testCtx(t)
	ns, other := namespace(t), namespace(t)
	var c corruptions
	r := newSealedStore[user](t, ns, ring, c.record)
	r2 := newSealedStore[user](t, other, ring, c.record)
	prefixed := newStore[user](t, RedisOptions{Prefix: "other:", Namespace: ns, Encrypt: ring, OnCorrupt: c.record})
	for _, s := range []*Redis[user]{r, r2, prefixed} {
		for _, k := range []string{"a", "b"} {
			if _, err := s.Set(ctx, k, entry(user{Name: "user " + k}, 5)); err != nil {
				t.Fatal(err)
			}
		}
	}
	copyHash := func(from, to string) error { return rdb.Copy(ctx, from, to, 0, true).Err() }
	copyField := func(from, to string) error {
		d, err := rdb.HGet(ctx, from, rkey.FieldData).Result()
		if err != nil {
			return err
		}
		return rdb.HSet(ctx, to, rkey.FieldData, d).Err()
	}
	tests := []struct {
		name     string
		from, to *Redis[user]
		move     func(from, to string) error
	}{
		{"COPY a to b", r, r, copyHash},
		{"HSET a's data field into b", r, r, copyField},
		{"COPY from another namespace", r2, r, copyHash},
		{"COPY from another prefix", prefixed, r, copyHash},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := r.Set(ctx, "b", entry(user{Name: "user b"}, 5)); err != nil {
				t.Fatal(err)
			}
			if err := tt.move(tt.from.keys.Value("a"), tt.to.keys.Value("b")); err != nil {
				t.Fatal(err)
			}
			before := r.Corrupted()
			e, f, err := r.Get(ctx, "b")
			if err != nil || f != Miss || e != (Entry[user]{}) {
				t.Fatalf("Get(b) = %+v, %v, %v; want zero, miss, nil", e, f, err)
			}
			if r.Corrupted() != before+1 {
				t.Fatalf("Corrupted() = %d, want %d", r.Corrupted(), before+1)
			}
			key, err := c.last(t, i+1)
			if key != "b" || !errors.Is(err, keyring.ErrDecrypt) || !strings.Contains(err.Error(), "authentication failed") {
				t.Fatalf("OnCorrupt(%q, %v); want b, keyring.ErrDecrypt", key, err)
			}
			// The value read through lock's script is refused the same way.
			raw := rawThroughLock(t, ns, "b")
			if e, f := r.Decode("b", raw); f != Miss || e != (Entry[user]{}) {
				t.Fatalf("Decode() = %+v, %v; want a miss", e, f)
			}
			c.last(t, i+2)
			c.keys, c.errs = c.keys[:i+1], c.errs[:i+1]
		})
	}
	// Untouched keys still read.
	if e, f, err := r.Get(ctx, "a"); err != nil || f != Fresh || e.Value.Name != "user a" {
		t.Fatalf("Get(a) = %+v, %v, %v", e, f, err)
	}
}

// rawThroughLock reads key's stored bytes as the pipeline does with a
// lock: package lock's acquire script, which reads the expiry field in
// clear and returns the data field as it is.
func rawThroughLock(t *testing.T, ns, key string) []byte {
	t.Helper()
	lk, err := rlock.NewRedis(rdb, rlock.RedisOptions{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Wait()
	lease, raw, fresh, err := lk.TryAcquireOrGet(testCtx(t), key, time.Minute, time.Now())
	if err != nil || lease != nil || !fresh || raw == nil {
		t.Fatalf("TryAcquireOrGet() = %v, %d bytes, fresh %v, %v; want the fresh value without the lock", lease, len(raw), fresh, err)
	}
	return raw
}

func TestRedis_encrypt_failuresAreMisses(t *testing.T) {
	a := keyring.Key{ID: 1, Secret: secret(1, 32)}
	ringA := mustKeyring(t, a)
	ctx := testCtx(t)
	tests := []struct {
		name   string
		writer RedisOptions // Namespace filled in
		reader *keyring.Ring
		alter  func(d []byte) []byte
		want   string
	}{
		{"another key with the same id", RedisOptions{Encrypt: ringA}, mustKeyring(t, keyring.Key{ID: 1, Secret: secret(9, 32)}), nil, "authentication failed"},
		{"a key id the ring no longer holds", RedisOptions{Encrypt: ringA}, mustKeyring(t, keyring.Key{ID: 2, Secret: secret(2, 32)}), nil, "which the keyring (ids [2]) does not hold"},
		{"stored in clear", RedisOptions{}, ringA, nil, "stored without encryption"},
		{"a byte changed", RedisOptions{Encrypt: ringA}, ringA, func(d []byte) []byte { d[len(d)/2] ^= 0x20; return d }, "authentication failed"},
		{"truncated", RedisOptions{Encrypt: ringA}, ringA, func(d []byte) []byte { return d[:sealOverhead-1] }, "want at least 34"},
		{"tag cut off", RedisOptions{Encrypt: ringA}, ringA, func(d []byte) []byte { return d[:len(d)-sealTag] }, "authentication failed"},
		{"empty", RedisOptions{Encrypt: ringA}, ringA, func([]byte) []byte { return nil }, "0 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := namespace(t)
			w := tt.writer
			w.Namespace = ns
			writer := newStore[user](t, w)
			if _, err := writer.Set(ctx, "k", entry(user{Name: "secret name"}, 3)); err != nil {
				t.Fatal(err)
			}
			if tt.alter != nil {
				d, err := rdb.HGet(ctx, writer.keys.Value("k"), rkey.FieldData).Bytes()
				if err != nil {
					t.Fatal(err)
				}
				if err := rdb.HSet(ctx, writer.keys.Value("k"), rkey.FieldData, tt.alter(d)).Err(); err != nil {
					t.Fatal(err)
				}
			}
			var c corruptions
			reader := newSealedStore[user](t, ns, tt.reader, c.record)
			e, f, err := reader.Get(ctx, "k")
			if err != nil || f != Miss || e != (Entry[user]{}) {
				t.Fatalf("Get() = %+v, %v, %v; want zero, miss, nil", e, f, err)
			}
			key, cerr := c.last(t, 1)
			if key != "k" || reader.Corrupted() != 1 || !errors.Is(cerr, keyring.ErrDecrypt) || !strings.Contains(cerr.Error(), tt.want) {
				t.Fatalf("OnCorrupt(%q, %v), Corrupted() = %d; want k, keyring.ErrDecrypt saying %q, 1", key, cerr, reader.Corrupted(), tt.want)
			}
			assertNoLeak(t, "the error", cerr.Error(), a.Secret, secret(9, 32), secret(2, 32))
			// The reader's own write replaces it (fence 3, equal: accepted).
			if stored, err := reader.Set(ctx, "k", entry(user{Name: "reloaded"}, 3)); err != nil || !stored {
				t.Fatalf("Set() over the unusable value = %v, %v", stored, err)
			}
			if e, f, err := reader.Get(ctx, "k"); err != nil || f != Fresh || e.Value.Name != "reloaded" {
				t.Fatalf("Get() after the rewrite = %+v, %v, %v", e, f, err)
			}
		})
	}
	// A store without encryption finds a sealed value unusable too, and
	// never serves the sealed bytes as a value.
	ns := namespace(t)
	if _, err := newSealedStore[string](t, ns, ringA, nil).Set(ctx, "k", entry("v", 0)); err != nil {
		t.Fatal(err)
	}
	var c corruptions
	plain := newStore[string](t, RedisOptions{Namespace: ns, OnCorrupt: c.record})
	if e, f, err := plain.Get(ctx, "k"); err != nil || f != Miss || e.Value != "" {
		t.Fatalf("plain Get() of a sealed value = %+v, %v, %v; want a miss", e, f, err)
	}
	if _, err := c.last(t, 1); !errors.Is(err, errEnvelope) {
		t.Fatalf("plain store reported %v, want errEnvelope", err)
	}
}

// TestRedis_encrypt_scriptsKeepWorking checks that the fields the scripts
// read stay usable under encryption: fencing refuses a lower fence, the
// lock's acquire script answers a fresh value without the lock and grants
// the lock above the stored fence.
func TestRedis_encrypt_scriptsKeepWorking(t *testing.T) {
	ring := mustKeyring(t, keyring.Key{ID: 1, Secret: secret(1, 24)})
	ctx := testCtx(t)
	ns := namespace(t)
	r := newSealedStore[user](t, ns, ring, nil)
	if stored, err := r.Set(ctx, "k", entry(user{Name: "five"}, 5)); err != nil || !stored {
		t.Fatalf("Set(fence 5) = %v, %v", stored, err)
	}
	if stored, err := r.Set(ctx, "k", entry(user{Name: "four"}, 4)); err != nil || stored {
		t.Fatalf("Set(fence 4) = %v, %v; want refused", stored, err)
	}
	raw := rawThroughLock(t, ns, "k")
	if e, f := r.Decode("k", raw); f != Fresh || e.Value.Name != "five" || e.Fence != 5 {
		t.Fatalf("Decode() of the script's bytes = %+v, %v", e, f)
	}
	// Stale by its expiry field: the script grants the lock, with a fence
	// above the stored one, and the holder's commit lands.
	now := time.Now()
	stale := Entry[user]{Value: user{Name: "stale"}, Written: now.Add(-time.Hour), Expires: now.Add(-time.Second), StaleUntil: now.Add(time.Hour), Fence: 6}
	if stored, err := r.Set(ctx, "k", stale); err != nil || !stored {
		t.Fatalf("Set(stale) = %v, %v", stored, err)
	}
	lk, err := rlock.NewRedis(rdb, rlock.RedisOptions{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Wait()
	lease, raw, fresh, err := lk.TryAcquireOrGet(ctx, "k", time.Minute, time.Now())
	if err != nil || lease == nil || fresh || lease.Fence() <= 6 {
		t.Fatalf("TryAcquireOrGet() = %v, fresh %v, %v; want a grant above fence 6", lease, fresh, err)
	}
	if e, f := r.Decode("k", raw); f != Stale || e.Value.Name != "stale" {
		t.Fatalf("Decode() of the stale copy = %+v, %v", e, f)
	}
	if stored, err := r.Commit(ctx, "k", entry(user{Name: "new"}, lease.Fence()), lease.Token()); err != nil || !stored {
		t.Fatalf("Commit() = %v, %v", stored, err)
	}
	lease.Forget()
	if e, f, err := r.Get(ctx, "k"); err != nil || f != Fresh || e.Value.Name != "new" {
		t.Fatalf("Get() = %+v, %v, %v", e, f, err)
	}
}

// TestRedis_encrypt_rotation runs the rotation procedure over Redis with
// three processes' stores in one namespace: no read fails at any step.
func TestRedis_encrypt_rotation(t *testing.T) {
	a, b := keyring.Key{ID: 1, Secret: secret(1, 32)}, keyring.Key{ID: 2, Secret: secret(2, 32)}
	ctx := testCtx(t)
	ns := namespace(t)
	steps := [][3]*keyring.Ring{
		{mustKeyring(t, a), mustKeyring(t, a), mustKeyring(t, a)},
		{mustKeyring(t, a, b), mustKeyring(t, a), mustKeyring(t, a, b)},
		{mustKeyring(t, b, a), mustKeyring(t, a, b), mustKeyring(t, b, a)},
		{mustKeyring(t, b), mustKeyring(t, b, a), mustKeyring(t, b)},
	}
	for i, rings := range steps {
		var stores [3]*Redis[string]
		for j, ring := range rings {
			stores[j] = newSealedStore[string](t, ns, ring, nil)
		}
		for j, w := range stores {
			key := fmt.Sprintf("step%d-writer%d", i, j)
			if _, err := w.Set(ctx, key, entry(key, 0)); err != nil {
				t.Fatal(err)
			}
			for k, r := range stores {
				if e, f, err := r.Get(ctx, key); err != nil || f != Fresh || e.Value != key {
					t.Fatalf("step %d: store %d (%v) read %s: %+v, %v, %v", i, k, rings[k], key, e, f, err)
				}
			}
		}
	}
}
