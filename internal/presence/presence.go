// Package presence keeps a saturating count of whether the reads of late
// found what they looked for, so that a caller can try the cheap read
// first when they mostly do.
package presence

import "sync/atomic"

const (
	// Max is the count's ceiling.
	Max = 64
	// On is the count at and above which [Count.Likely] reports true.
	On = Max / 2
	// Miss is how much a read that found nothing lowers the count.
	Miss = 3
)

// Count says whether the reads of late mostly found their value, as on a
// pod that starts beside others that keep Redis warm: a read that found
// its value raises it by one and one that did not lowers it by [Miss]. It
// climbs while more than three reads in four find their value and sinks
// to zero otherwise; a run of misses brings a full count below [On]
// within a dozen reads. At either end a read writes nothing. The zero
// Count is ready and reports false.
type Count struct {
	_ [64]byte // a cache line of its own: every read of a pipeline loads it
	n atomic.Int32
	_ [60]byte
}

// Likely reports whether the reads of late mostly found their value.
func (c *Count) Likely() bool { return c.n.Load() >= On }

// Saw counts a read that found its value, or not.
func (c *Count) Saw(found bool) {
	for {
		old := c.n.Load()
		n := old + 1
		if !found {
			n = old - Miss
		}
		n = min(max(n, 0), Max)
		if n == old || c.n.CompareAndSwap(old, n) {
			return
		}
	}
}
