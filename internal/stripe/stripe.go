// Package stripe is a count that every core bumps at once, such as a
// pipeline's L1 hits: kept in stripes, each bump adding to one picked at
// random, so that cores counting at once rarely write one cache line.
package stripe

import (
	"math/rand/v2"
	"sync/atomic"
)

// Stripes is the number of stripes of a Counter (a power of two): enough
// that the cores of a large machine counting at once rarely pick the
// same one.
const Stripes = 32

// Counter is a striped count. Its zero value is ready; padding keeps the
// stripes off one another's lines (the struct that holds a Counter pads
// it off its other fields).
type Counter struct {
	s [Stripes]hitStripe
}

// hitStripe is one stripe of a Counter, a cache line of its own: two
// counters 64 bytes apart never share a line, however the Counter is
// aligned.
type hitStripe struct {
	n atomic.Uint64
	_ [56]byte
}

// Inc counts one, in a stripe picked at random (math/rand/v2's
// generator, which each thread of the runtime keeps for itself): cores
// that count at once, even for the same hot key, rarely write the same
// line.
func (c *Counter) Inc() { c.s[rand.Uint32()&(Stripes-1)].n.Add(1) }

// Load is the count, the sum of its stripes: exact once the bumps it
// counts have returned.
func (c *Counter) Load() uint64 {
	var n uint64
	for i := range c.s {
		n += c.s[i].n.Load()
	}
	return n
}

// Used is how many stripes hold a count: how far the bumps spread.
func (c *Counter) Used() int {
	used := 0
	for i := range c.s {
		if c.s[i].n.Load() > 0 {
			used++
		}
	}
	return used
}
