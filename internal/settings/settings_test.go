package settings

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/herdguard/herdguard/internal/loadcall"
)

// testDefaults are the defaults as the cases of WithDefaults expect them.
var testDefaults = struct {
	Timeout, FlightTimeout time.Duration
	Jitter                 float64
	Lock                   Lock
}{
	Timeout: DefaultTimeout, FlightTimeout: DefaultFlightTimeout, Jitter: DefaultJitter,
	Lock: Lock{Lease: DefaultLockLease, MaxWait: DefaultLockMaxWait, Heartbeat: DefaultLockHeartbeat, Poll: DefaultLockPoll},
}

// cached is a keyed pipeline with a cache: the settings no rule refuses.
func cached() Config { return Config{Cache: true, TTL: time.Minute} }

func TestCheck(t *testing.T) {
	named := Wiring{Name: "p"}
	lock := func(l Lock) Wiring { return Wiring{Name: "p", LockOn: true, Lock: l} }
	with := func(f func(*Config)) Config { c := cached(); f(&c); return c }
	keyless := func(f func(*Config)) Config { c := Config{Keyless: true}; f(&c); return c }
	for _, tc := range []struct {
		name string
		c    Config
		w    Wiring
		want []string // the fields of the problems, in order
		text string   // in the first problem's text
	}{
		{"fine", cached(), named, nil, ""},
		{"fine keyless", Config{Keyless: true, CallTimeout: time.Second}, named, nil, ""},
		{"fine lock", cached(), lock(Lock{}), nil, ""},
		{"no name", cached(), Wiring{}, []string{"New"}, "needs a name"},
		{"keyless cache", keyless(func(c *Config) { c.Cache, c.TTL = true, time.Minute }), named, []string{"Cache"}, "Keyless"},
		{"keyless lock", Config{Keyless: true}, lock(Lock{}), []string{"Lock"}, "Keyless"},
		{"keyless redis", Config{Keyless: true}, Wiring{Name: "p", Redis: true}, []string{"Redis"}, "Keyless"},
		{"keyless backend", Config{Keyless: true}, Wiring{Name: "p", Backend: true}, []string{"Backend"}, "Keyless"},
		{"keyless singleflight", keyless(func(c *Config) { c.SingleFlight = true }), named, []string{"SingleFlight"}, "Keyless"},
		{"keyless stale", keyless(func(c *Config) { c.Grace = time.Second }), named, []string{"Stale"}, "Keyless"},
		{"keyless negative", keyless(func(c *Config) { c.NegativeTTL = time.Second }), named, []string{"NegativeTTL"}, "Keyless"},
		{"keyed calltimeout", with(func(c *Config) { c.CallTimeout = time.Second }), named, []string{"CallTimeout"}, "only a Keyless"},
		{"redis without cache", Config{}, Wiring{Name: "p", Redis: true}, []string{"Redis"}, "add Cache(ttl)"},
		{"backend without cache", Config{}, Wiring{Name: "p", Backend: true}, []string{"Backend"}, "add Cache(ttl)"},
		{"lock without cache", Config{}, lock(Lock{}), []string{"Lock"}, "add Cache(ttl)"},
		{"stale without cache", Config{Grace: time.Second}, named, []string{"Stale"}, "add Cache(ttl)"},
		{"negative without cache", Config{NegativeTTL: time.Second}, named, []string{"NegativeTTL"}, "add Cache(ttl)"},
		{"swr without cache", Config{StaleWhileRevalidate: true, Grace: time.Second}, named, []string{"Stale", "StaleWhileRevalidate"}, "add Cache(ttl)"},
		{"early without cache", Config{EarlyBeta: 1}, named, []string{"EarlyRefresh"}, "add Cache(ttl)"},
		{"l1ttl without cache", Config{L1TTL: time.Second}, named, []string{"L1TTL"}, "add Cache(ttl)"},
		{"maxentries without cache", Config{MaxEntries: 10}, named, []string{"MaxEntries"}, "add Cache(ttl)"},
		{"redis and backend", cached(), Wiring{Name: "p", Redis: true, Backend: true}, []string{"Backend"}, "not both"},
		{"swr without stale", with(func(c *Config) { c.StaleWhileRevalidate = true }), named, []string{"StaleWhileRevalidate"}, "needs Stale(grace)"},
		{"swr with stale", with(func(c *Config) { c.StaleWhileRevalidate, c.Grace = true, time.Second }), named, nil, ""},
		{"l1ttl too long", with(func(c *Config) { c.L1TTL = 2 * time.Minute }), named, []string{"L1TTL"}, "longer than the Cache ttl"},
		{"l1ttl as long", with(func(c *Config) { c.L1TTL = time.Minute }), named, nil, ""},
		{"negative too long", with(func(c *Config) { c.NegativeTTL = 2 * time.Minute }), named, []string{"NegativeTTL"}, "shorter than the Cache ttl"},
		{"negative as long", with(func(c *Config) { c.NegativeTTL = time.Minute }), named, nil, ""},
		{"bad retry", with(func(c *Config) { c.Retry = &loadcall.Retry{MaxAttempts: -1} }), named, []string{"Retry"}, "MaxAttempts"},
		{"fine retry", with(func(c *Config) { c.Retry = &loadcall.Retry{} }), named, nil, ""},
		{"negative lease without Lock", cached(), Wiring{Name: "p", Lock: Lock{Lease: -1}}, nil, ""},
		{"negative lease", cached(), lock(Lock{Lease: -1}), []string{"Lock"}, "Lease must not be negative"},
		{"flight below timeout", with(func(c *Config) { c.FlightTimeout = 5 * time.Second }), named, []string{"FlightTimeout"}, "at least Timeout"},
		{"flight below set timeout", with(func(c *Config) { c.Timeout, c.TimeoutSet = 2*time.Minute, true }), named, []string{"FlightTimeout"}, "at least Timeout"},
		{"keyless flight below timeout", keyless(func(c *Config) { c.Timeout, c.TimeoutSet, c.FlightTimeout = time.Minute, true, time.Second }), named, nil, ""},
		{"in order", Config{StaleWhileRevalidate: true, L1TTL: time.Second, CallTimeout: time.Second, FlightTimeout: time.Second},
			Wiring{Redis: true, Backend: true, LockOn: true, Lock: Lock{Poll: -1}},
			[]string{"New", "CallTimeout", "Redis", "Backend", "Lock", "StaleWhileRevalidate", "L1TTL", "Backend", "StaleWhileRevalidate", "Lock", "FlightTimeout"}, "needs a name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c.WithDefaults()
			ps := c.Check(tc.w)
			var fields []string
			for _, p := range ps {
				fields = append(fields, p.Field)
			}
			if !slices.Equal(fields, tc.want) {
				t.Fatalf("problems %v, want fields %v", ps, tc.want)
			}
			if len(ps) > 0 && !strings.Contains(ps[0].Problem, tc.text) {
				t.Errorf("first problem %q, want it to say %q", ps[0].Problem, tc.text)
			}
		})
	}
}

// TestCheck_negativeLockDurations: each negative lock duration is named.
func TestCheck_negativeLockDurations(t *testing.T) {
	c := cached().WithDefaults()
	ps := c.Check(Wiring{Name: "p", LockOn: true, Lock: Lock{Lease: -1, MaxWait: -1, Poll: -1, Heartbeat: -1}})
	var got []string
	for _, p := range ps {
		got = append(got, p.Problem)
	}
	want := []string{
		"Lease must not be negative (zero takes the default)",
		"MaxWait must not be negative (zero takes the default)",
		"Poll must not be negative (zero takes the default)",
		"Heartbeat must not be negative (zero takes the default)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems %q, want %q", got, want)
	}
}

func TestConfig_WithDefaults(t *testing.T) {
	d := testDefaults
	for _, tc := range []struct {
		name string
		c    Config
		want Config
	}{
		{"keyed", Config{}, Config{Timeout: d.Timeout, FlightTimeout: d.FlightTimeout, Jitter: d.Jitter}},
		{"keyless has no timeout", Config{Keyless: true}, Config{Keyless: true, FlightTimeout: d.FlightTimeout, Jitter: d.Jitter}},
		{"set timeout", Config{Timeout: time.Second, TimeoutSet: true}, Config{Timeout: time.Second, TimeoutSet: true, FlightTimeout: d.FlightTimeout, Jitter: d.Jitter}},
		{"keyless set timeout", Config{Keyless: true, Timeout: time.Second, TimeoutSet: true},
			Config{Keyless: true, Timeout: time.Second, TimeoutSet: true, FlightTimeout: d.FlightTimeout, Jitter: d.Jitter}},
		{"set flight", Config{FlightTimeout: time.Hour}, Config{Timeout: d.Timeout, FlightTimeout: time.Hour, Jitter: d.Jitter}},
		{"jitter off", Config{JitterSet: true}, Config{Timeout: d.Timeout, FlightTimeout: d.FlightTimeout, JitterSet: true}},
		{"set jitter", Config{Jitter: 0.5, JitterSet: true}, Config{Timeout: d.Timeout, FlightTimeout: d.FlightTimeout, Jitter: 0.5, JitterSet: true}},
		{"l1ttl from ttl", Config{Cache: true, TTL: time.Hour},
			Config{Cache: true, TTL: time.Hour, L1TTL: time.Hour, Timeout: d.Timeout, FlightTimeout: d.FlightTimeout, Jitter: d.Jitter}},
		{"set l1ttl", Config{Cache: true, TTL: time.Hour, L1TTL: time.Minute},
			Config{Cache: true, TTL: time.Hour, L1TTL: time.Minute, Timeout: d.Timeout, FlightTimeout: d.FlightTimeout, Jitter: d.Jitter}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.WithDefaults(); got != tc.want {
				t.Errorf("WithDefaults = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestLock_WithDefaults(t *testing.T) {
	d := testDefaults.Lock
	for _, tc := range []struct {
		name    string
		l, want Lock
	}{
		{"zero", Lock{}, d},
		{"set", Lock{Lease: time.Minute, MaxWait: time.Second, Heartbeat: 2 * time.Second, Poll: time.Millisecond},
			Lock{Lease: time.Minute, MaxWait: time.Second, Heartbeat: 2 * time.Second, Poll: time.Millisecond}},
		{"heartbeat capped by lease", Lock{Lease: 900 * time.Millisecond}, Lock{Lease: 900 * time.Millisecond, MaxWait: d.MaxWait, Heartbeat: 300 * time.Millisecond, Poll: d.Poll}},
		{"set heartbeat capped", Lock{Lease: 3 * time.Second, Heartbeat: 2 * time.Second}, Lock{Lease: 3 * time.Second, MaxWait: d.MaxWait, Heartbeat: time.Second, Poll: d.Poll}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.l.WithDefaults(); got != tc.want {
				t.Errorf("WithDefaults = %+v, want %+v", got, tc.want)
			}
		})
	}
}
