package resilience

import (
	"testing"
	"time"
)

// TestDefaults_documented: the Default constants have the values that
// their doc comments, those of the settings they fill, and the README
// give.
func TestDefaults_documented(t *testing.T) {
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"DefaultMaxEntries", DefaultMaxEntries, 10_000},
		{"DefaultJitter", DefaultJitter, 0.1},
		{"DefaultTimeout", DefaultTimeout, 10 * time.Second},
		{"DefaultFlightTimeout", DefaultFlightTimeout, time.Minute},
		{"DefaultLockLease", DefaultLockLease, 30 * time.Second},
		{"DefaultLockMaxWait", DefaultLockMaxWait, 30 * time.Second},
		{"DefaultLockHeartbeat", DefaultLockHeartbeat, time.Second},
		{"DefaultRedisTimeout", DefaultRedisTimeout, 200 * time.Millisecond},
		{"DefaultBackendTimeout", DefaultBackendTimeout, time.Second},
		{"DefaultRedisOpenTimeout", DefaultRedisOpenTimeout, time.Second},
		{"DefaultRedisFailureRatio", DefaultRedisFailureRatio, 0.5},
		{"DefaultPrefix", DefaultPrefix, "hg:"},
		{"the lock's poll", lockDefaults(LockSettings{}).Poll, 200 * time.Millisecond},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}
