package cache

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/internal/rlock"
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

func mustKeyring(t testing.TB, primary Key, others ...Key) *Keyring {
	t.Helper()
	r, err := NewKeyring(primary, others...)
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

func TestNewKeyring_invalid(t *testing.T) {
	good := Key{ID: 1, Secret: secret(1, 32)}
	tests := []struct {
		name    string
		primary Key
		others  []Key
		wantErr string
	}{
		{"empty secret", Key{ID: 7}, nil, "key id 7: secret is 0 bytes, want 16, 24 or 32"},
		{"15 bytes", Key{ID: 7, Secret: secret(2, 15)}, nil, "key id 7: secret is 15 bytes"},
		{"33 bytes", good, []Key{{ID: 8, Secret: secret(2, 33)}}, "key id 8: secret is 33 bytes"},
		{"all zero", good, []Key{{ID: 9, Secret: make([]byte, 32)}}, "key id 9: secret is all zero bytes"},
		{"primary id twice", good, []Key{{ID: 1, Secret: secret(3, 16)}}, "key id 1 appears twice"},
		{"other id twice", good, []Key{{ID: 2, Secret: secret(3, 16)}, {ID: 3, Secret: secret(4, 16)}, {ID: 2, Secret: secret(5, 24)}}, "key id 2 appears twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewKeyring(tt.primary, tt.others...)
			if err == nil || r != nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("NewKeyring() = %v, %v; want nil, an error containing %q", r, err, tt.wantErr)
			}
			secrets := [][]byte{tt.primary.Secret}
			for _, k := range tt.others {
				if !allZero(k.Secret) {
					secrets = append(secrets, k.Secret)
				}
			}
			assertNoLeak(t, "the error", err.Error(), secrets...)
		})
	}
}

func TestKeyring_sealOpen(t *testing.T) {
	for _, n := range []int{16, 24, 32} {
		t.Run(fmt.Sprintf("AES-%d", n*8), func(t *testing.T) {
			k := Key{ID: 4000000000, Secret: secret(byte(n), n)}
			r := mustKeyring(t, k)
			if r.Primary() != k.ID || fmt.Sprint(r.IDs()) != "[4000000000]" {
				t.Fatalf("Primary() = %d, IDs() = %v", r.Primary(), r.IDs())
			}
			plain := []byte("the plaintext of a cached value")
			sealed := r.Seal("hg:{1:n:k}:v", plain)
			if len(sealed) != len(plain)+sealOverhead || bytes.Contains(sealed, plain[:10]) {
				t.Fatalf("Seal() = %x: want %d bytes, the plaintext hidden", sealed, len(plain)+sealOverhead)
			}
			if again := r.Seal("hg:{1:n:k}:v", plain); bytes.Equal(again, sealed) {
				t.Fatal("two seals of one value are equal: the nonce does not change")
			}
			got, err := r.Open("hg:{1:n:k}:v", sealed)
			if err != nil || !bytes.Equal(got, plain) {
				t.Fatalf("Open() = %q, %v; want %q", got, err, plain)
			}
			if got, err := r.Open("hg:{1:n:k}:v", r.Seal("hg:{1:n:k}:v", nil)); err != nil || len(got) != 0 {
				t.Fatalf("Open(Seal(empty)) = %q, %v", got, err)
			}
		})
	}
}

func TestKeyring_Open_failures(t *testing.T) {
	a := Key{ID: 1, Secret: secret(1, 32)}
	r := mustKeyring(t, a)
	const name = "hg:{1:n:a}:v"
	plain := encodeEnvelope(validEnvelopes()[0])
	sealed := r.Seal(name, plain)
	flip := func(i int) []byte {
		b := bytes.Clone(sealed)
		b[i] ^= 0x01
		return b
	}
	tests := []struct {
		name   string
		ring   *Keyring
		at     string
		sealed []byte
		want   string
	}{
		{"another name", r, "hg:{1:n:b}:v", sealed, "authentication failed"},
		{"another namespace", r, "hg:{1:m:a}:v", sealed, "authentication failed"},
		{"another key with the same id", mustKeyring(t, Key{ID: 1, Secret: secret(2, 32)}), name, sealed, "key id 1: authentication failed"},
		{"a key id the ring does not hold", mustKeyring(t, Key{ID: 2, Secret: secret(1, 32)}), name, sealed, "key id 1, which the keyring (ids [2]) does not hold"},
		{"key id relabelled", mustKeyring(t, a, Key{ID: 2, Secret: secret(1, 32)}), name, func() []byte {
			b := bytes.Clone(sealed)
			b[5] = 2 // id 2 holds the same secret: the header is bound too
			return b
		}(), "key id 2: authentication failed"},
		{"stored without encryption", r, name, plain, "stored without encryption"},
		{"wrong magic", r, name, flip(0), "magic byte"},
		{"unknown version", r, name, flip(1), "unknown version 0"},
		{"empty", r, name, nil, "0 bytes, want at least 34"},
		{"nonce changed", r, name, flip(sealHeader), "authentication failed"},
		{"ciphertext changed", r, name, flip(sealHeader + sealNonce), "authentication failed"},
		{"tag changed", r, name, flip(len(sealed) - 1), "authentication failed"},
		{"truncated by one byte", r, name, sealed[:len(sealed)-1], "authentication failed"},
		{"extended by one byte", r, name, append(bytes.Clone(sealed), 0), "authentication failed"},
		{"zero keyring", &Keyring{}, name, sealed, "holds no keys"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.ring.Open(tt.at, tt.sealed)
			if !errors.Is(err, ErrDecrypt) || got != nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Open() = %q, %v; want nil, ErrDecrypt saying %q", got, err, tt.want)
			}
			assertNoLeak(t, "the error", err.Error(), a.Secret, secret(2, 32))
		})
	}
	// Every single-bit change and every truncation fails.
	for i := range sealed {
		for bit := range 8 {
			b := bytes.Clone(sealed)
			b[i] ^= 1 << bit
			if _, err := r.Open(name, b); !errors.Is(err, ErrDecrypt) {
				t.Fatalf("bit %d of byte %d flipped: Open() error = %v, want ErrDecrypt", bit, i, err)
			}
		}
	}
	for n := range len(sealed) {
		if _, err := r.Open(name, sealed[:n]); !errors.Is(err, ErrDecrypt) {
			t.Fatalf("first %d bytes: Open() error = %v, want ErrDecrypt", n, err)
		}
	}
}

// TestKeyring_rotation walks the documented procedure: at every step, every
// process opens what every other process seals.
func TestKeyring_rotation(t *testing.T) {
	a, b := Key{ID: 1, Secret: secret(1, 32)}, Key{ID: 2, Secret: secret(2, 16)}
	steps := [][]*Keyring{
		{mustKeyring(t, a)},                          // before
		{mustKeyring(t, a), mustKeyring(t, a, b)},    // 1: B deployed as an opening key, pod by pod
		{mustKeyring(t, a, b), mustKeyring(t, b, a)}, // 2: B made primary, pod by pod
		{mustKeyring(t, b, a), mustKeyring(t, b)},    // 3: A dropped once A's values expired
	}
	for i, rings := range steps {
		for _, w := range rings {
			for _, r := range rings {
				got, err := r.Open("k", w.Seal("k", []byte("v")))
				if err != nil || string(got) != "v" {
					t.Fatalf("step %d: %v sealed, %v opened: %q, %v", i, w, r, got, err)
				}
			}
		}
	}
	// Skipping step 1 is what the procedure avoids.
	if _, err := mustKeyring(t, a).Open("k", mustKeyring(t, b, a).Seal("k", []byte("v"))); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("a pod without B opened B's value: %v", err)
	}
}

func TestKey_redacted(t *testing.T) {
	k := Key{ID: 42, Secret: secret(5, 32)}
	k2 := Key{ID: 43, Secret: secret(7, 16)}
	ring := mustKeyring(t, k, k2)
	type options struct {
		Keys    []Key
		Encrypt *Keyring
		Ring    Keyring
		Key     Key
		KeyPtr  *Key
	}
	o := options{Keys: []Key{k, k2}, Encrypt: ring, Ring: *ring, Key: k, KeyPtr: &k}
	var texts []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T %v"} {
		texts = append(texts, fmt.Sprintf(verb, k), fmt.Sprintf(verb, &k), fmt.Sprintf(verb, o), fmt.Sprintf(verb, &o),
			fmt.Sprintf(verb, ring), fmt.Sprintf(verb, *ring), fmt.Sprintf(verb, []Key{k, k2}))
	}
	texts = append(texts, k.String(), k.GoString(), ring.String(), ring.GoString(), fmt.Sprint(ring.IDs()))
	j, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	texts = append(texts, string(j))
	var logs bytes.Buffer
	for _, h := range []slog.Handler{slog.NewTextHandler(&logs, nil), slog.NewJSONHandler(&logs, nil)} {
		slog.New(h).Info("keys", "key", k, "ptr", &k, "ring", ring, "keys", []Key{k, k2}, "options", o)
	}
	texts = append(texts, logs.String())
	for _, text := range texts {
		assertNoLeak(t, "the text", text, k.Secret, k2.Secret)
	}
	// The IDs do show: they are what an operator needs.
	if s := fmt.Sprintf("%v", o); !strings.Contains(s, "ID: 42") || !strings.Contains(s, "primary: 42, ids: [42 43]") {
		t.Fatalf("%%v = %s; want the ids", s)
	}
	if !strings.Contains(logs.String(), `"id":42`) || !strings.Contains(string(j), `{"ID":42}`) {
		t.Fatalf("log %s, JSON %s; want the ids", logs.String(), j)
	}
}

// newSealedStore is newStore with a keyring.
func newSealedStore[V any](t *testing.T, ns string, ring *Keyring, onCorrupt func(string, error)) *Redis[V] {
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
	r, err := NewRedis[string](rdb, RedisOptions{Namespace: "n", Encrypt: &Keyring{}})
	if err == nil || r != nil || !strings.Contains(err.Error(), "build it with NewKeyring") {
		t.Fatalf("NewRedis() = %v, %v; want an error about the keyring", r, err)
	}
}

func TestRedis_encrypt_roundTripAndWhatRedisHolds(t *testing.T) {
	ring := mustKeyring(t, Key{ID: 3, Secret: secret(3, 32)})
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
	ring := mustKeyring(t, Key{ID: 1, Secret: secret(1, 32)})
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
			if key != "b" || !errors.Is(err, ErrDecrypt) || !strings.Contains(err.Error(), "authentication failed") {
				t.Fatalf("OnCorrupt(%q, %v); want b, ErrDecrypt", key, err)
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
	a := Key{ID: 1, Secret: secret(1, 32)}
	ringA := mustKeyring(t, a)
	ctx := testCtx(t)
	tests := []struct {
		name   string
		writer RedisOptions // Namespace filled in
		reader *Keyring
		alter  func(d []byte) []byte
		want   string
	}{
		{"another key with the same id", RedisOptions{Encrypt: ringA}, mustKeyring(t, Key{ID: 1, Secret: secret(9, 32)}), nil, "authentication failed"},
		{"a key id the ring no longer holds", RedisOptions{Encrypt: ringA}, mustKeyring(t, Key{ID: 2, Secret: secret(2, 32)}), nil, "which the keyring (ids [2]) does not hold"},
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
			if key != "k" || reader.Corrupted() != 1 || !errors.Is(cerr, ErrDecrypt) || !strings.Contains(cerr.Error(), tt.want) {
				t.Fatalf("OnCorrupt(%q, %v), Corrupted() = %d; want k, ErrDecrypt saying %q, 1", key, cerr, reader.Corrupted(), tt.want)
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
	ring := mustKeyring(t, Key{ID: 1, Secret: secret(1, 24)})
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
	a, b := Key{ID: 1, Secret: secret(1, 32)}, Key{ID: 2, Secret: secret(2, 32)}
	ctx := testCtx(t)
	ns := namespace(t)
	steps := [][3]*Keyring{
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

// FuzzOpen checks that opening never panics, that every failure matches
// ErrDecrypt, and that nothing but what Seal made opens.
func FuzzOpen(f *testing.F) {
	ring := mustKeyring(f, Key{ID: 1, Secret: secret(1, 32)}, Key{ID: 2, Secret: secret(2, 16)})
	const name = "hg:{1:n:k}:v"
	for _, e := range validEnvelopes() {
		f.Add(ring.Seal(name, encodeEnvelope(e)))
		f.Add(encodeEnvelope(e))
	}
	f.Add([]byte{})
	f.Add([]byte{sealMagic, sealVersion, 0, 0, 0, 2})
	f.Add(bytes.Repeat([]byte{sealMagic}, sealOverhead))
	f.Fuzz(func(t *testing.T, b []byte) {
		plain, err := ring.Open(name, b)
		if err != nil {
			if !errors.Is(err, ErrDecrypt) || plain != nil {
				t.Fatalf("Open() = %x, %v; want nil, ErrDecrypt", plain, err)
			}
			return
		}
		if len(b) < sealOverhead || b[0] != sealMagic || b[1] != sealVersion {
			t.Fatalf("Open() accepted %x", b)
		}
		// Only a seal of ours opens: then so does the same name only.
		if _, err := ring.Open(name+"x", b); err == nil {
			t.Fatalf("%x opened under two names", b)
		}
		if again, err := ring.Open(name, ring.Seal(name, plain)); err != nil || !bytes.Equal(again, plain) {
			t.Fatalf("resealing: %x, %v", again, err)
		}
	})
}

func BenchmarkKeyring(b *testing.B) {
	ring := mustKeyring(b, Key{ID: 1, Secret: secret(1, 32)})
	const name = "hg:{5:users:user:42}:v"
	for _, size := range []int{64, 1024, 16384} {
		plain := encodeEnvelope(envelope{payload: bytes.Repeat([]byte("x"), size-envHeader)})
		sealed := ring.Seal(name, plain)
		b.Run(fmt.Sprintf("Seal/%dB", size), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				ring.Seal(name, plain)
			}
		})
		b.Run(fmt.Sprintf("Open/%dB", size), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ring.Open(name, sealed); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
