package rcache

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/herdguard/herdguard/keyring"
)

// Coder turns entries into the bytes a shared store keeps and back: the
// codec, the envelope (envelope.go) and, with a keyring, the seal
// (package keyring). [Redis] and package remote's Remote both embed it, so
// that a value reads the same whichever store carries it. Init sets it up.
type Coder[V any] struct {
	codec Codec
	ring  *keyring.Ring // nil: entries in clear
	// name is the name a value is sealed under (its associated data):
	// for Redis, the full Redis key.
	name      func(key string) string
	onCorrupt func(key string, err error)
	corrupted atomic.Uint64
}

// Init sets c up: codec (nil for [JSON]) encodes values, ring (nil for
// none) seals them under name(key), and onCorrupt (may be nil) hears of
// the bytes that do not decode.
func (c *Coder[V]) Init(codec Codec, ring *keyring.Ring, name func(string) string, onCorrupt func(string, error)) {
	if codec == nil {
		codec = JSON
	}
	c.codec, c.ring, c.name, c.onCorrupt = codec, ring, name, onCorrupt
}

// DecodeAt turns the bytes stored for key into an entry and its freshness
// now: nil (nothing stored) is a [Miss]; bytes that do not decode are a
// Miss too, counted and reported to OnCorrupt.
func (c *Coder[V]) DecodeAt(key string, raw []byte) (Entry[V], Freshness) {
	if raw == nil {
		return Entry[V]{}, Miss
	}
	e, err := c.decode(key, raw)
	if err != nil {
		c.corrupt(key, err)
		return Entry[V]{}, Miss
	}
	f := e.freshnessAt(time.Now())
	if f == Miss {
		return Entry[V]{}, Miss
	}
	return e, f
}

func (c *Coder[V]) decode(key string, raw []byte) (Entry[V], error) {
	raw, err := c.open(key, raw)
	if err != nil {
		return Entry[V]{}, err
	}
	env, err := decodeEnvelope(raw)
	if err != nil {
		return Entry[V]{}, err
	}
	e := Entry[V]{
		NotFound:     env.notFound,
		Written:      env.written,
		Expires:      env.expires,
		StaleUntil:   env.staleUntil,
		LoadDuration: env.loadDuration,
		Fence:        env.fence,
	}
	if !env.notFound {
		if err := c.unmarshal(env.payload, &e.Value); err != nil {
			return Entry[V]{}, err
		}
	}
	return e, nil
}

// Encode lays e out for key, with fence in its envelope, sealed when c
// has a keyring. until is when a store may drop it (the later of
// e.Expires and e.StaleUntil) and ttl how long that is from now. op names
// the operation in errors: [ErrExpiredEntry] when until has passed, one
// matching [ErrCodec] when the value does not encode.
func (c *Coder[V]) Encode(op, key string, e Entry[V], fence int64) (raw []byte, until time.Time, ttl time.Duration, err error) {
	until = e.StaleUntil
	if until.Before(e.Expires) {
		until = e.Expires
	}
	ttl = time.Until(until)
	if ttl <= 0 {
		return nil, until, 0, fmt.Errorf("cache: %s: %w", op, ErrExpiredEntry)
	}
	env := envelope{
		notFound:     e.NotFound,
		written:      e.Written,
		expires:      e.Expires,
		staleUntil:   until,
		loadDuration: max(e.LoadDuration, 0),
		fence:        fence,
	}
	if !e.NotFound {
		if env.payload, err = c.marshal(e.Value); err != nil {
			return nil, until, 0, fmt.Errorf("cache: %s: %w", op, err)
		}
	}
	return c.Seal(key, encodeEnvelope(env)), until, ttl, nil
}

// unmarshal runs the codec, turning a failure or a panic (a custom
// UnmarshalJSON, say) into an error matching [ErrCodec].
func (c *Coder[V]) unmarshal(b []byte, v *V) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: decode panicked: %v", ErrCodec, p)
		}
	}()
	if err := c.codec.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: decode: %w", ErrCodec, err)
	}
	return nil
}

// marshal is unmarshal's twin for encoding.
func (c *Coder[V]) marshal(v V) (b []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: encode panicked: %v", ErrCodec, p)
		}
	}()
	if b, err = c.codec.Marshal(v); err != nil {
		return nil, fmt.Errorf("%w: encode: %w", ErrCodec, err)
	}
	return b, nil
}

// Corrupted returns how many reads found bytes that did not decode.
func (c *Coder[V]) Corrupted() uint64 { return c.corrupted.Load() }

// Tombstone returns the bytes of an invalidation's tombstone for key: an
// entry with no expiry and no stale-until, written at written with fence,
// that every reader takes for a miss; sealed when c has a keyring.
func (c *Coder[V]) Tombstone(key string, written time.Time, fence int64) []byte {
	return c.Seal(key, encodeEnvelope(envelope{notFound: true, written: written, fence: fence}))
}

func (c *Coder[V]) corrupt(key string, err error) {
	c.corrupted.Add(1)
	if c.onCorrupt != nil {
		c.onCorrupt(key, err)
	}
}

// Seal encrypts an encoded entry for key when c has a keyring. What the
// store reads (fence, expiry) stays in clear beside it; only the entry's
// bytes are sealed, bound to the value's name.
func (c *Coder[V]) Seal(key string, envelope []byte) []byte {
	if c.ring == nil {
		return envelope
	}
	return c.ring.Seal(c.name(key), envelope)
}

// open is Seal's inverse; without a keyring it returns raw as it is.
func (c *Coder[V]) open(key string, raw []byte) ([]byte, error) {
	if c.ring == nil {
		return raw, nil
	}
	return c.ring.Open(c.name(key), raw)
}
