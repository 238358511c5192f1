// Package keyring seals values with AES-GCM under a ring of keys that can
// rotate without a single value failing to open. A [Ring] is what a shared
// store of package cache (RedisOptions.Encrypt) and of package resilience
// (RedisOptions.Encrypt, BackendOptions.Encrypt) seals its entries with,
// each bound to the name it is stored under.
//
// Printing a [Key] or a [Ring] with any fmt verb, logging it with log/slog
// or encoding a Key as JSON shows key IDs only, never key material.
package keyring

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
)

// A sealed value is an AES-GCM ciphertext with a header naming the key
// that sealed it:
//
//	offset size field
//	0      1    magic (0xE5)
//	1      1    version (1)
//	2      4    key id, big endian
//	6      12   nonce, random
//	18     ...  ciphertext, as long as the plaintext
//	end-16 16   authentication tag
//
// The associated data is the header's first 6 bytes followed by the name
// the value is stored under (for a Redis store of package cache, the full Redis
// key, prefix and namespace included), so a value copied to another name, or relabelled
// with another version or key id, does not open.
const (
	sealMagic    = 0xE5
	sealVersion  = 1
	sealHeader   = 6 // magic, version, key id
	sealNonce    = 12
	sealTag      = 16
	sealOverhead = sealHeader + sealNonce + sealTag

	// plainMagic is the first byte of an entry a cache stores unsealed (its
	// envelope), so that Open can say the value was stored in clear.
	plainMagic = 0xC4
)

// ErrDecrypt is matched by every error of [Ring.Open]: bytes that are
// not a sealed value, a value sealed under a key id the keyring does not
// hold, and a value that fails authentication (another key with the same
// id, tampered or truncated bytes, or bytes moved from another name). The
// errors name key ids, never key material.
var ErrDecrypt = errors.New("keyring: value did not decrypt")

// Key is one AES key of a [Ring]. Its ID travels with every value it
// seals, so that a reader knows which key opens it; IDs are not secret.
//
// Printing a Key with any fmt verb, logging it with log/slog or encoding
// it as JSON shows its ID only: the secret is redacted.
type Key struct {
	// ID names the key; unique within a keyring.
	ID uint32
	// Secret is the AES key: 16, 24 or 32 random bytes (AES-128, -192 or
	// -256). The keyring keeps a cipher built from it, not the slice.
	Secret []byte
}

// String returns the key's ID with the secret redacted.
func (k Key) String() string {
	return "keyring.Key{ID: " + strconv.FormatUint(uint64(k.ID), 10) + ", Secret: [redacted]}"
}

// GoString is String, for %#v.
func (k Key) GoString() string { return k.String() }

// Format writes String for every verb, so that no verb (%x, %q, %+v...)
// prints the secret.
func (k Key) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(k.String())) }

// LogValue shows the ID only to log/slog.
func (k Key) LogValue() slog.Value {
	return slog.GroupValue(slog.Uint64("id", uint64(k.ID)), slog.String("secret", "[redacted]"))
}

// MarshalJSON encodes the ID only: {"ID":n}.
func (k Key) MarshalJSON() ([]byte, error) {
	return []byte(`{"ID":` + strconv.FormatUint(uint64(k.ID), 10) + `}`), nil
}

// Ring seals values with its primary key and opens values sealed by any
// key it holds, so that keys can rotate while every process keeps reading
// what the others wrote: see [New]. It is safe for concurrent use,
// and immutable: rotating means building a new Ring.
//
// Each seal draws a random 96-bit nonce, so one key must not seal more
// than 2^32 values (NIST SP 800-38D); rotate well before.
type Ring struct {
	keys []ringKey // the primary first
}

type ringKey struct {
	id   uint32
	aead cipher.AEAD
}

// New returns a keyring that seals with primary and opens values
// sealed by primary or by any of others.
//
// To rotate from key A to key B without a single value failing to open:
// deploy New(A, B) to every process (B opens, A still seals); once
// every process has B, deploy New(B, A) (B seals); once every value
// sealed by A has expired, deploy New(B).
//
// It fails when a secret is not 16, 24 or 32 bytes long, when a secret is
// all zero bytes (a placeholder, not a key), or when two keys share an ID.
// Errors name the ID at fault, never the secret.
func New(primary Key, others ...Key) (*Ring, error) {
	all := append([]Key{primary}, others...)
	r := &Ring{keys: make([]ringKey, 0, len(all))}
	for i, k := range all {
		switch n := len(k.Secret); {
		case n != 16 && n != 24 && n != 32:
			return nil, fmt.Errorf("keyring: key id %d: secret is %d bytes, want 16, 24 or 32 (AES-128, -192, -256)", k.ID, n)
		case allZero(k.Secret):
			return nil, fmt.Errorf("keyring: key id %d: secret is all zero bytes, which is no key", k.ID)
		}
		for _, prev := range all[:i] {
			if prev.ID == k.ID {
				return nil, fmt.Errorf("keyring: key id %d appears twice; ids must be unique", k.ID)
			}
		}
		block, err := aes.NewCipher(k.Secret)
		if err != nil {
			return nil, fmt.Errorf("keyring: key id %d: cannot build the cipher", k.ID)
		}
		aead, err := cipher.NewGCMWithRandomNonce(block)
		if err != nil {
			return nil, fmt.Errorf("keyring: key id %d: cannot build the cipher", k.ID)
		}
		r.keys = append(r.keys, ringKey{id: k.ID, aead: aead})
	}
	return r, nil
}

func allZero(b []byte) bool {
	var or byte
	for _, c := range b {
		or |= c
	}
	return or == 0
}

// usable reports whether r was built by New.
func (r *Ring) usable() bool { return r != nil && len(r.keys) > 0 }

// Primary returns the ID of the key that seals.
func (r *Ring) Primary() uint32 {
	if !r.usable() {
		return 0
	}
	return r.keys[0].id
}

// IDs returns the IDs of the keys r holds, the primary first.
func (r *Ring) IDs() []uint32 {
	if r == nil {
		return nil
	}
	ids := make([]uint32, len(r.keys))
	for i, k := range r.keys {
		ids[i] = k.id
	}
	return ids
}

// String names the keys' IDs, the primary first; never their secrets.
func (r *Ring) String() string {
	if !r.usable() {
		return "keyring.Ring{}"
	}
	var b strings.Builder
	b.WriteString("keyring.Ring{primary: ")
	b.WriteString(strconv.FormatUint(uint64(r.keys[0].id), 10))
	b.WriteString(", ids: [")
	for i, k := range r.keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatUint(uint64(k.id), 10))
	}
	b.WriteString("]}")
	return b.String()
}

// GoString is String, for %#v.
func (r *Ring) GoString() string { return r.String() }

// Format writes String for every verb.
func (r *Ring) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(r.String())) }

// LogValue shows the IDs only to log/slog.
func (r *Ring) LogValue() slog.Value { return slog.StringValue(r.String()) }

// Seal encrypts plaintext with the primary key, bound to name: only
// [Ring.Open] with the same name opens it. The result is 34 bytes
// longer than plaintext: magic byte 0xE5, version 1, the key id (4 bytes,
// big endian), a random 12-byte nonce, the ciphertext and a 16-byte tag.
// It panics if r was not built by [New].
func (r *Ring) Seal(name string, plaintext []byte) []byte {
	k := r.keys[0]
	out := make([]byte, sealHeader, sealOverhead+len(plaintext))
	out[0], out[1] = sealMagic, sealVersion
	binary.BigEndian.PutUint32(out[2:], k.id)
	return k.aead.Seal(out, nil, plaintext, associated(out[:sealHeader], name))
}

// Open decrypts a value sealed by [Ring.Seal] under name, with whichever
// key of r sealed it. Every failure matches [ErrDecrypt]; it never panics,
// whatever sealed holds. The result does not alias sealed.
func (r *Ring) Open(name string, sealed []byte) ([]byte, error) {
	switch {
	case len(sealed) < sealOverhead:
		return nil, fmt.Errorf("%w: %d bytes, want at least %d", ErrDecrypt, len(sealed), sealOverhead)
	case sealed[0] == plainMagic:
		return nil, fmt.Errorf("%w: the value was stored without encryption", ErrDecrypt)
	case sealed[0] != sealMagic:
		return nil, fmt.Errorf("%w: magic byte %#x", ErrDecrypt, sealed[0])
	case sealed[1] != sealVersion:
		return nil, fmt.Errorf("%w: unknown version %d", ErrDecrypt, sealed[1])
	case !r.usable():
		return nil, fmt.Errorf("%w: the keyring holds no keys", ErrDecrypt)
	}
	id := binary.BigEndian.Uint32(sealed[2:])
	for _, k := range r.keys {
		if k.id != id {
			continue
		}
		plain, err := k.aead.Open(nil, nil, sealed[sealHeader:], associated(sealed[:sealHeader], name))
		if err != nil {
			return nil, fmt.Errorf("%w: key id %d: authentication failed (another key with that id, altered bytes, or a value moved from another key)", ErrDecrypt, id)
		}
		return plain, nil
	}
	return nil, fmt.Errorf("%w: sealed under key id %d, which the keyring (ids %v) does not hold", ErrDecrypt, id, r.IDs())
}

// associated returns the associated data of a value: its header, then its
// name. The header is of fixed length, so no two pairs run together.
func associated(header []byte, name string) []byte {
	ad := make([]byte, 0, len(header)+len(name))
	return append(append(ad, header...), name...)
}
