package counts

import (
	"testing"

	"github.com/herdguard/herdguard/telemetry"
)

// Duplicates are counted by cause, Stats reading their sum; none are
// counted for n of zero or less.
func TestDuplicates_byCause(t *testing.T) {
	var c Counts
	for _, tc := range []struct {
		cause Cause
		n     int
		want  bool
	}{
		{Takeover, 1, true}, {MaxWait, 3, true}, {FailOpen, 2, true},
		{Takeover, 0, false}, {FailOpen, -1, false},
	} {
		if got := c.Duplicates(tc.cause, tc.n); got != tc.want {
			t.Errorf("Duplicates(%v, %d) = %v, want %v", tc.cause, tc.n, got, tc.want)
		}
	}
	for cause, want := range [Causes]uint64{Takeover: 1, MaxWait: 3, FailOpen: 2} {
		if n := c.dups[cause].Load(); n != want {
			t.Errorf("%v: %d, want %d", Cause(cause), n, want)
		}
	}
	wantRead(t, "duplicates", &c, Snapshot{DuplicateLoads: 6})
}

// Each cause has the name the metric gives it.
func TestCause_names(t *testing.T) {
	for cause, want := range [Causes]string{
		Takeover: telemetry.DuplicateTakeover,
		MaxWait:  telemetry.DuplicateMaxWait,
		FailOpen: telemetry.DuplicateFailOpen,
	} {
		if got := Cause(cause).String(); got != want {
			t.Errorf("Cause(%d) = %q, want %q", cause, got, want)
		}
	}
}

// A load is a duplicate under a grant that took the lock over, or
// unlocked after failing open with a lock on; not under a grant whose
// re-check failed open, nor unlocked without a lock, nor after a wait.
func TestLoad_duplicate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		load  Load
		cause Cause
		dup   bool
	}{
		{"granted", Load{Granted: true, Locking: true}, 0, false},
		{"took over", Load{Granted: true, TookOver: true, Locking: true}, Takeover, true},
		{"took over, re-check failed open", Load{Granted: true, TookOver: true, FailedOpen: true, Locking: true}, Takeover, true},
		{"granted, re-check failed open", Load{Granted: true, FailedOpen: true, Locking: true}, 0, false},
		{"unlocked, failed open", Load{FailedOpen: true, Locking: true}, FailOpen, true},
		{"failed open without a lock", Load{FailedOpen: true}, 0, false},
		{"unlocked", Load{Locking: true}, 0, false},
		{"no lock", Load{}, 0, false},
	} {
		cause, dup := tc.load.Duplicate()
		if dup != tc.dup || dup && cause != tc.cause {
			t.Errorf("%s: Duplicate() = %v, %v; want %v, %v", tc.name, cause, dup, tc.cause, tc.dup)
		}
	}
}
