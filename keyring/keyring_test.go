package keyring

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
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

// plainEntries are plaintexts laid out as a cache lays out an entry it
// stores unsealed: its envelope, magic byte first.
func plainEntries() [][]byte {
	entry := func(payload string) []byte {
		return append(append([]byte{plainMagic, 1}, make([]byte, 41)...), payload...)
	}
	return [][]byte{entry(""), entry(`"ada"`), entry(strings.Repeat("x", 300))}
}

func mustKeyring(t testing.TB, primary Key, others ...Key) *Ring {
	t.Helper()
	r, err := New(primary, others...)
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
			r, err := New(tt.primary, tt.others...)
			if err == nil || r != nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New() = %v, %v; want nil, an error containing %q", r, err, tt.wantErr)
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
	plain := plainEntries()[0]
	sealed := r.Seal(name, plain)
	flip := func(i int) []byte {
		b := bytes.Clone(sealed)
		b[i] ^= 0x01
		return b
	}
	tests := []struct {
		name   string
		ring   *Ring
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
		{"zero keyring", &Ring{}, name, sealed, "holds no keys"},
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
	steps := [][]*Ring{
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
		Encrypt *Ring
		Ring    Ring
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

// FuzzOpen checks that opening never panics, that every failure matches
// ErrDecrypt, and that nothing but what Seal made opens.
func FuzzOpen(f *testing.F) {
	ring := mustKeyring(f, Key{ID: 1, Secret: secret(1, 32)}, Key{ID: 2, Secret: secret(2, 16)})
	const name = "hg:{1:n:k}:v"
	for _, e := range plainEntries() {
		f.Add(ring.Seal(name, e))
		f.Add(e)
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
		plain := append([]byte{plainMagic, 1}, bytes.Repeat([]byte("x"), size-2)...)
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
