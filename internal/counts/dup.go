package counts

import "github.com/herdguard/herdguard/telemetry"

// Cause is the cause of a duplicate load.
type Cause int

// The causes of a duplicate load, as [telemetry.MetricDuplicateLoads]
// names them.
const (
	Takeover Cause = iota // under a grant that took a holder's lock over
	MaxWait               // unlocked, after MaxWait, while a live holder loads
	FailOpen              // unlocked, because the lock's backend failed
	// Causes is the number of causes.
	Causes = iota
)

var causeNames = [...]string{
	Takeover: telemetry.DuplicateTakeover,
	MaxWait:  telemetry.DuplicateMaxWait,
	FailOpen: telemetry.DuplicateFailOpen,
}

// String is the cause's name in [telemetry.MetricDuplicateLoads].
func (c Cause) String() string { return causeNames[c] }

// Duplicates counts n duplicate loads of cause, and reports whether it
// counted any (n > 0).
func (c *Counts) Duplicates(cause Cause, n int) bool {
	if n <= 0 {
		return false
	}
	c.dups[cause].Add(uint64(n))
	return true
}

// Load is a load about to begin, as the duplicate count takes it.
type Load struct {
	// Granted is set when it loads under a grant of the lock.
	Granted bool
	// TookOver is set when that grant took the lock over from a holder
	// that stopped beating.
	TookOver bool
	// FailedOpen is set when the call failed open before it.
	FailedOpen bool
	// Locking is set when the pipeline has a lock.
	Locking bool
}

// Duplicate reports whether the load is a duplicate, and of what cause:
// under a grant that took the lock over, or unlocked because the lock
// failed open with a lock on. A load under a grant whose re-check failed
// open is not one: the grant still keeps the others waiting. A load
// after MaxWait is counted where the wait ends, not here.
func (l Load) Duplicate() (Cause, bool) {
	switch {
	case l.Granted && l.TookOver:
		return Takeover, true
	case !l.Granted && l.FailedOpen && l.Locking:
		return FailOpen, true
	}
	return 0, false
}
