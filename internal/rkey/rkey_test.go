package rkey

import (
	"strings"
	"testing"
)

func TestNew_layout(t *testing.T) {
	tests := []struct {
		name, prefix, ns, key                string
		value, lock, fence, channel, wantErr string
	}{
		{name: "default prefix", ns: "users", key: "42",
			value: "hg:{5:users:42}:v", lock: "hg:{5:users:42}:lock", fence: "hg:{5:users:42}:fence", channel: "hg:{5:users}:announce"},
		{name: "custom prefix", prefix: "app:", ns: "p", key: "a:b",
			value: "app:{1:p:a:b}:v", lock: "app:{1:p:a:b}:lock", fence: "app:{1:p:a:b}:fence", channel: "app:{1:p}:announce"},
		{name: "braces escaped", ns: "a}b", key: "{x}%",
			value: "hg:{5:a%7Db:%7Bx%7D%25}:v", lock: "hg:{5:a%7Db:%7Bx%7D%25}:lock", fence: "hg:{5:a%7Db:%7Bx%7D%25}:fence", channel: "hg:{5:a%7Db}:announce"},
		{name: "empty namespace", key: "k", wantErr: "rkey: namespace is required"},
		{name: "brace in prefix", prefix: "x{", ns: "n", wantErr: `rkey: prefix "x{" must not contain braces`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.prefix, tt.ns)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("New() error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New() error = %v", err)
			}
			for _, c := range []struct{ got, want string }{
				{s.Value(tt.key), tt.value},
				{s.Lock(tt.key), tt.lock},
				{s.Fence(tt.key), tt.fence},
				{s.Channel(), tt.channel},
			} {
				if c.got != c.want {
					t.Errorf("got %q, want %q", c.got, c.want)
				}
			}
		})
	}
}

// TestSpace_noTwoPairsShareAKey tries names and keys built to collide: no
// two (namespace, key) pairs may map to the same Redis key.
func TestSpace_noTwoPairsShareAKey(t *testing.T) {
	parts := []string{"", "1", ":", "a:", ":1", "admin", "admin:1", "users", "users:admin", "}", "{", "%7D", "%", "}:", "5:users"}
	seen := map[string][2]string{}
	for _, ns := range parts {
		if ns == "" {
			continue
		}
		s, err := New("", ns)
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range parts {
			got := s.Value(key)
			if prev, dup := seen[got]; dup {
				t.Fatalf("(%q, %q) and (%q, %q) both map to %q", prev[0], prev[1], ns, key, got)
			}
			seen[got] = [2]string{ns, key}
		}
	}
}

// TestSpace_hashTagSpansTheWholeKey checks that the Cluster hash tag (what
// lies between the first '{' and the next '}') holds the whole escaped key,
// so keys with braces do not pile into one slot.
func TestSpace_hashTagSpansTheWholeKey(t *testing.T) {
	s, err := New("", "n")
	if err != nil {
		t.Fatal(err)
	}
	tags := map[string]bool{}
	for _, key := range []string{"}a", "}b", "x}", "y}", "{}", "}{", "a}b}c"} {
		k := s.Value(key)
		open := strings.IndexByte(k, '{')
		end := strings.IndexByte(k[open+1:], '}')
		tag := k[open+1 : open+1+end]
		if want := "1:n:" + escape(key); tag != want {
			t.Errorf("key %q: hash tag %q, want %q", key, tag, want)
		}
		tags[tag] = true
	}
	if len(tags) != 7 {
		t.Errorf("%d distinct hash tags for 7 keys", len(tags))
	}
}

// TestSpace_KeyOfLock_roundTrip checks that a lock key names its cache key
// back, and that keys of other namespaces, and other kinds of key, do not.
func TestSpace_KeyOfLock_roundTrip(t *testing.T) {
	s, err := New("", "n*[s]")
	if err != nil {
		t.Fatal(err)
	}
	other, err := New("", "n")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"k", "", "a:b", "{x}%", "%7B", "}:lock", "*?[\\"} {
		if got, ok := s.KeyOfLock(s.Lock(key)); !ok || got != key {
			t.Errorf("KeyOfLock(Lock(%q)) = %q, %v", key, got, ok)
		}
		for _, name := range []string{s.Value(key), s.Fence(key), other.Lock(key)} {
			if got, ok := s.KeyOfLock(name); ok {
				t.Errorf("KeyOfLock(%q) = %q, true; want false", name, got)
			}
		}
	}
	if want := `hg:{5:n\*\[s\]:*}:lock`; s.LockPattern() != want {
		t.Errorf("LockPattern() = %q, want %q", s.LockPattern(), want)
	}
}
