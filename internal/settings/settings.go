// Package settings holds the rules over the settings a pipeline's builder
// (package resilience) records, and the defaults they take. The builder
// refuses a bad argument at once; the rules here are the ones that read
// several settings together (which need which, which conflict), checked
// when the pipeline is built. They say what is wrong and how to fix it,
// and resilience turns each problem into its ConfigError.
package settings

import (
	"reflect"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/internal/loadcall"
)

// Config is the settings that the rules read and the defaults fill.
// Each field is what the builder method of the same name recorded.
type Config struct {
	Keyless bool

	Cache                bool // Cache(ttl) set TTL
	TTL                  time.Duration
	L1TTL                time.Duration
	MaxEntries           int
	Jitter               float64
	JitterSet            bool // Jitter was called: 0 then turns jitter off
	NegativeTTL          time.Duration
	Grace                time.Duration // Stale
	StaleWhileRevalidate bool
	EarlyBeta            float64 // EarlyRefresh

	SingleFlight bool

	Timeout       time.Duration
	TimeoutSet    bool // Timeout was called
	CallTimeout   time.Duration
	FlightTimeout time.Duration
	Retry         *loadcall.Retry // nil without Retry
}

// Wiring is what the rules read of the settings that the pipeline's
// wiring reads too, which the builder keeps beside its Config.
type Wiring struct {
	Name           string
	Redis, Backend bool // the pipeline has Redis, a Backend
	LockOn         bool // Lock was called, with Lock
	Lock           Lock
}

// Lock is the lock's settings, field for field resilience's LockSettings
// (which converts to and from it). Zero fields take defaults.
type Lock struct {
	Lease     time.Duration
	MaxWait   time.Duration
	Heartbeat time.Duration
	Poll      time.Duration
}

// The values the settings take when the builder did not set them.
// Package resilience publishes them, the poll's aside, as its Default
// constants, whose doc comments say what each bounds and why.
const (
	DefaultTimeout       = 10 * time.Second // of a keyed pipeline's attempt
	DefaultFlightTimeout = time.Minute
	DefaultJitter        = 0.1
	DefaultLockLease     = 30 * time.Second
	DefaultLockMaxWait   = 30 * time.Second
	DefaultLockHeartbeat = time.Second
	DefaultLockPoll      = 200 * time.Millisecond
)

// Problem is one thing wrong with the settings: the builder method to
// change (Field) and what is wrong (Problem).
type Problem struct {
	Field, Problem string
}

// WithDefaults returns c with the defaults in place of each setting left
// unset. A Keyless pipeline takes no attempt timeout: its calls run on
// their caller's context (and CallTimeout). L1TTL defaults to the Cache
// ttl.
func (c Config) WithDefaults() Config {
	if !c.TimeoutSet && !c.Keyless {
		c.Timeout = DefaultTimeout
	}
	if c.FlightTimeout == 0 {
		c.FlightTimeout = DefaultFlightTimeout
	}
	if !c.JitterSet {
		c.Jitter = DefaultJitter
	}
	if c.L1TTL == 0 {
		c.L1TTL = c.TTL
	}
	return c
}

// WithDefaults returns l with the default in place of each zero field,
// and the heartbeat capped at a third of the lease, so that a holder
// beats at least twice before its lease runs out.
func (l Lock) WithDefaults() Lock {
	if l.Lease == 0 {
		l.Lease = DefaultLockLease
	}
	if l.MaxWait == 0 {
		l.MaxWait = DefaultLockMaxWait
	}
	if l.Poll == 0 {
		l.Poll = DefaultLockPoll
	}
	if l.Heartbeat == 0 {
		l.Heartbeat = DefaultLockHeartbeat
	}
	l.Heartbeat = min(l.Heartbeat, l.Lease/3)
	return l
}

// Check returns the problems of c and w, in a fixed order, each saying
// what to change. c must have its defaults (WithDefaults): FlightTimeout
// is checked against the Timeout an attempt will have.
func (c *Config) Check(w Wiring) []Problem {
	var ps []Problem
	bad := func(field, problem string) {
		ps = append(ps, Problem{Field: field, Problem: problem})
	}
	if w.Name == "" {
		bad("New", "the pipeline needs a name: it appears in errors, spans, metrics and Redis keys")
	}
	if c.Keyless {
		for _, s := range []struct {
			on    bool
			field string
		}{{c.Cache, "Cache"}, {w.LockOn, "Lock"}, {w.Redis, "Redis"}, {w.Backend, "Backend"}, {c.SingleFlight, "SingleFlight"},
			{c.Grace > 0, "Stale"}, {c.NegativeTTL > 0, "NegativeTTL"}} {
			if s.on {
				bad(s.field, "needs a key, but the pipeline is Keyless: remove one of the two")
			}
		}
	} else if c.CallTimeout > 0 {
		bad("CallTimeout", "bounds Do, which only a Keyless pipeline has; keyed calls are bounded by FlightTimeout and the caller's context")
	}
	if !c.Cache && !c.Keyless {
		for _, s := range []struct {
			on    bool
			field string
		}{{w.Redis, "Redis"}, {w.Backend, "Backend"}, {w.LockOn, "Lock"}, {c.Grace > 0, "Stale"}, {c.NegativeTTL > 0, "NegativeTTL"},
			{c.StaleWhileRevalidate, "StaleWhileRevalidate"}, {c.EarlyBeta > 0, "EarlyRefresh"}, {c.L1TTL > 0, "L1TTL"}, {c.MaxEntries > 0, "MaxEntries"}} {
			if s.on {
				bad(s.field, "needs a cache to keep values in: add Cache(ttl)")
			}
		}
	}
	if w.Redis && w.Backend {
		bad("Backend", "replaces Redis: a pipeline coordinates through Redis or a Backend, not both; remove one of the two")
	}
	if c.StaleWhileRevalidate && c.Grace <= 0 {
		bad("StaleWhileRevalidate", "serves stale copies, so it needs Stale(grace)")
	}
	if c.L1TTL > 0 && c.TTL > 0 && c.L1TTL > c.TTL {
		bad("L1TTL", "must not be longer than the Cache ttl, or processes would serve values Redis has already replaced")
	}
	if c.NegativeTTL > 0 && c.TTL > 0 && c.NegativeTTL > c.TTL {
		bad("NegativeTTL", "should be shorter than the Cache ttl: a not-found is cached briefly")
	}
	if c.Retry != nil {
		if p := c.Retry.Validate(); p != "" {
			bad("Retry", p)
		}
	}
	if w.LockOn {
		l := w.Lock
		for _, d := range []struct {
			name string
			d    time.Duration
		}{{"Lease", l.Lease}, {"MaxWait", l.MaxWait}, {"Poll", l.Poll}, {"Heartbeat", l.Heartbeat}} {
			if d.d < 0 {
				bad("Lock", d.name+" must not be negative (zero takes the default)")
			}
		}
	}
	if !c.Keyless && c.FlightTimeout < c.Timeout {
		bad("FlightTimeout", "must be at least Timeout, or no loader attempt could finish")
	}
	return ps
}

// IsNil reports whether v is nil or holds a nil pointer (a *redis.Client
// variable never assigned), which would crash the first call: the
// builder refuses such a setting.
func IsNil(v any) bool {
	if v == nil {
		return true
	}
	r := reflect.ValueOf(v)
	return r.Kind() == reflect.Pointer && r.IsNil()
}

// LoaderBreaker is s, the settings of the loader's breaker, named name
// and counting the failures isFailure reports unless s says otherwise.
func LoaderBreaker(s breaker.Settings, name string, isFailure func(error) bool) breaker.Settings {
	if s.Name == "" {
		s.Name = name
	}
	if s.IsFailure == nil {
		s.IsFailure = isFailure
	}
	return s
}
