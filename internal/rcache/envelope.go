package rcache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// The envelope wraps a codec's payload with the entry's metadata, so that a
// reader learns freshness without decoding the value:
//
//	offset size field
//	0      1    magic (0xC4)
//	1      1    version (1)
//	2      1    flags (bit 0: not found; other bits must be zero)
//	3      8    written, unix nanoseconds, big endian (0: zero time)
//	11     8    expires, unix nanoseconds
//	19     8    stale-until, unix nanoseconds
//	27     8    load duration, nanoseconds (never negative)
//	35     8    fence (never negative)
//	43     ...  payload (empty when not found)
//
// A new layout gets a new version; a reader refuses versions it does not
// know, which the store treats as a miss.
const (
	envMagic     = 0xC4
	envVersion   = 1
	envHeader    = 43
	flagNotFound = 1 << 0
	knownFlags   = flagNotFound
)

// errEnvelope is matched by every envelope decoding error.
var errEnvelope = errors.New("cache: bad envelope")

// envelope is an [Entry] with its value still encoded.
type envelope struct {
	notFound     bool
	written      time.Time
	expires      time.Time
	staleUntil   time.Time
	loadDuration time.Duration
	fence        int64
	payload      []byte
}

// encodeEnvelope lays e out as described above.
func encodeEnvelope(e envelope) []byte {
	b := make([]byte, envHeader, envHeader+len(e.payload))
	b[0], b[1] = envMagic, envVersion
	if e.notFound {
		b[2] |= flagNotFound
	}
	be := binary.BigEndian
	be.PutUint64(b[3:], uint64(unixNano(e.written)))
	be.PutUint64(b[11:], uint64(unixNano(e.expires)))
	be.PutUint64(b[19:], uint64(unixNano(e.staleUntil)))
	be.PutUint64(b[27:], uint64(e.loadDuration))
	be.PutUint64(b[35:], uint64(e.fence))
	return append(b, e.payload...)
}

// decodeEnvelope parses b. It never panics; input that is truncated,
// garbled or of an unknown version returns an error matching errEnvelope.
// The payload aliases b.
func decodeEnvelope(b []byte) (envelope, error) {
	if len(b) < envHeader {
		return envelope{}, fmt.Errorf("%w: %d bytes, want at least %d", errEnvelope, len(b), envHeader)
	}
	if b[0] != envMagic {
		return envelope{}, fmt.Errorf("%w: magic byte %#x", errEnvelope, b[0])
	}
	if b[1] != envVersion {
		return envelope{}, fmt.Errorf("%w: unknown version %d", errEnvelope, b[1])
	}
	if b[2]&^knownFlags != 0 {
		return envelope{}, fmt.Errorf("%w: unknown flags %#x", errEnvelope, b[2])
	}
	be := binary.BigEndian
	e := envelope{
		notFound:     b[2]&flagNotFound != 0,
		written:      fromUnixNano(int64(be.Uint64(b[3:]))),
		expires:      fromUnixNano(int64(be.Uint64(b[11:]))),
		staleUntil:   fromUnixNano(int64(be.Uint64(b[19:]))),
		loadDuration: time.Duration(be.Uint64(b[27:])),
		fence:        int64(be.Uint64(b[35:])),
		payload:      b[envHeader:],
	}
	switch {
	case e.loadDuration < 0:
		return envelope{}, fmt.Errorf("%w: negative load duration", errEnvelope)
	case e.fence < 0:
		return envelope{}, fmt.Errorf("%w: negative fence", errEnvelope)
	case e.notFound && len(e.payload) != 0:
		return envelope{}, fmt.Errorf("%w: not-found entry with a payload", errEnvelope)
	}
	return e, nil
}

// unixNano maps the zero time to 0, which time.Time.UnixNano leaves
// undefined.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}
