package rkey

import "testing"

func TestNew_layout(t *testing.T) {
	tests := []struct {
		name, prefix, ns, key                string
		value, lock, fence, channel, wantErr string
	}{
		{name: "default prefix", ns: "users", key: "42",
			value: "hg:{users:42}:v", lock: "hg:{users:42}:lock", fence: "hg:{users:42}:fence", channel: "hg:{users}:announce"},
		{name: "custom prefix", prefix: "app:", ns: "p", key: "a:b",
			value: "app:{p:a:b}:v", lock: "app:{p:a:b}:lock", fence: "app:{p:a:b}:fence", channel: "app:{p}:announce"},
		{name: "empty namespace", key: "k", wantErr: "rkey: namespace is required"},
		{name: "brace in namespace", ns: "a}b", wantErr: `rkey: namespace "a}b" must not contain braces`},
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
