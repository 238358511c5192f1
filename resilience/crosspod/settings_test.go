package crosspod_test

import (
	"reflect"
	"strings"
	"time"

	"github.com/herdguard/herdguard/resilience"
)

// lockConfig is a pod's lock settings; zero fields take the library's
// defaults.
type lockConfig struct {
	Lease     time.Duration `json:"lease,omitempty"`
	MaxWait   time.Duration `json:"max_wait,omitempty"`
	Poll      time.Duration `json:"poll,omitempty"`
	Heartbeat time.Duration `json:"heartbeat,omitempty"`
}

// settings builds the pipeline's LockSettings. Heartbeat is set through
// reflection, so that these tests build against a LockSettings with or
// without the field; without it, a Heartbeat here has no effect.
func (c lockConfig) settings() resilience.LockSettings {
	s := resilience.LockSettings{Lease: c.Lease, MaxWait: c.MaxWait, Poll: c.Poll}
	if c.Heartbeat > 0 {
		setHeartbeat(&s, c.Heartbeat)
	}
	return s
}

// setHeartbeat sets s.Heartbeat to d if LockSettings has that field, and
// reports whether it did.
func setHeartbeat(s *resilience.LockSettings, d time.Duration) bool {
	f := reflect.ValueOf(s).Elem().FieldByName("Heartbeat")
	if !f.IsValid() || !f.CanSet() || f.Type() != reflect.TypeFor[time.Duration]() {
		return false
	}
	f.SetInt(int64(d))
	return true
}

// heartbeatSupported reports whether LockSettings has a Heartbeat field.
func heartbeatSupported() bool {
	var s resilience.LockSettings
	return setHeartbeat(&s, time.Second)
}

// String lists the fields that are set, for logs.
func (c lockConfig) String() string {
	var parts []string
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"lease", c.Lease}, {"max wait", c.MaxWait}, {"poll", c.Poll}, {"heartbeat", c.Heartbeat}} {
		if f.d > 0 {
			parts = append(parts, f.name+" "+f.d.String())
		}
	}
	if len(parts) == 0 {
		return "defaults"
	}
	return strings.Join(parts, ", ")
}
