package rcache

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

func validEnvelopes() []envelope {
	now := time.Unix(1_700_000_000, 123456789)
	return []envelope{
		{},
		{written: now, expires: now.Add(time.Minute), staleUntil: now.Add(time.Hour),
			loadDuration: 250 * time.Millisecond, fence: 42, payload: []byte(`{"a":1}`)},
		{notFound: true, written: now, expires: now.Add(time.Second), staleUntil: now.Add(time.Second), fence: 1},
		{written: now, expires: now, staleUntil: now, payload: []byte("0")},
		{expires: time.Unix(0, 1<<62), staleUntil: time.Unix(0, 1<<62), fence: 1<<63 - 1, payload: bytes.Repeat([]byte{0xff}, 1024)},
	}
}

func TestEnvelope_roundTrip(t *testing.T) {
	for _, want := range validEnvelopes() {
		b := encodeEnvelope(want)
		got, err := decodeEnvelope(b)
		if err != nil {
			t.Fatalf("decodeEnvelope(encodeEnvelope(%+v)) error = %v", want, err)
		}
		if !got.written.Equal(want.written) || !got.expires.Equal(want.expires) ||
			!got.staleUntil.Equal(want.staleUntil) || got.notFound != want.notFound ||
			got.loadDuration != want.loadDuration || got.fence != want.fence ||
			!bytes.Equal(got.payload, want.payload) {
			t.Errorf("round trip = %+v, want %+v", got, want)
		}
	}
}

func TestDecodeEnvelope_rejects(t *testing.T) {
	valid := encodeEnvelope(envelope{written: time.Now(), payload: []byte("1")})
	mutate := func(f func(b []byte) []byte) []byte {
		return f(append([]byte(nil), valid...))
	}
	tests := []struct {
		name string
		in   []byte
	}{
		{"nil", nil},
		{"truncated header", valid[:envHeader-1]},
		{"json instead of an envelope", []byte(`{"value":"not an envelope at all, just json"}`)},
		{"wrong magic", mutate(func(b []byte) []byte { b[0] = 'x'; return b })},
		{"unknown version", mutate(func(b []byte) []byte { b[1] = 2; return b })},
		{"unknown flag", mutate(func(b []byte) []byte { b[2] = 0x80; return b })},
		{"negative load duration", mutate(func(b []byte) []byte { b[27] = 0x80; return b })},
		{"negative fence", mutate(func(b []byte) []byte { b[35] = 0xff; return b })},
		{"not found with payload", mutate(func(b []byte) []byte { b[2] = flagNotFound; return b })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := decodeEnvelope(tt.in); !errors.Is(err, errEnvelope) {
				t.Fatalf("decodeEnvelope() error = %v, want errEnvelope", err)
			}
		})
	}
}

// FuzzDecodeEnvelope checks that decoding never panics and that whatever
// decodes re-encodes to the same bytes.
func FuzzDecodeEnvelope(f *testing.F) {
	for _, e := range validEnvelopes() {
		f.Add(encodeEnvelope(e))
	}
	f.Add([]byte{})
	f.Add([]byte{envMagic})
	f.Add([]byte{envMagic, envVersion, 0xff})
	f.Add([]byte("hello, world: not an envelope but long enough to pass the length check"))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEnvelope(b)
		if err != nil {
			if !errors.Is(err, errEnvelope) {
				t.Fatalf("error %v does not match errEnvelope", err)
			}
			return
		}
		if again := encodeEnvelope(e); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding changed the bytes:\n in  %x\n out %x", b, again)
		}
	})
}
