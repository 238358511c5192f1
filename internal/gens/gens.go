// Package gens orders a pipeline's L1 fills against its writes, with
// write generations: a load takes a stamp when it begins, and its fill is
// skipped if a write (Set, Invalidate, a drop heard from another process)
// touched the key since. See [Table].
package gens

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// slots is how many write generations a Table keeps. Keys share them by
// hash: a write to one key also stops, at worst, the L1 fill of a load of
// another key in flight at that moment, which then reads L2 next time.
const slots = 1024

var seed = maphash.MakeSeed()

// Table orders L1 fills against writes: a load takes a stamp when it
// begins, and its fill is skipped if a write touched the key's slot, or
// every key, after that. The check and the fill happen under the slot's
// mutex, as do a write and its own L1 change, so neither can slip
// between the other's steps. Its zero value is ready; it is safe for
// concurrent use.
type Table struct {
	seq   atomic.Uint64
	slots [slots]slot
	// all is seq at the last write to every key; written with every
	// slot's mutex held, read with one.
	all uint64
}

type slot struct {
	mu   sync.Mutex
	last uint64 // seq at the slot's last write
}

// Stamp is taken when a load begins.
func (g *Table) Stamp() uint64 { return g.seq.Load() }

func (g *Table) slot(key string) *slot {
	return &g.slots[maphash.String(seed, key)%slots]
}

// Fill runs fn (an L1 fill) unless key was written since stamp.
func (g *Table) Fill(key string, stamp uint64, fn func()) {
	s := g.slot(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last <= stamp && g.all <= stamp {
		fn()
	}
}

// Write runs fn (a write's own L1 change) as a write to key.
func (g *Table) Write(key string, fn func()) {
	s := g.slot(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = g.seq.Add(1)
	fn()
}

// WriteAll runs fn as a write to every key.
func (g *Table) WriteAll(fn func()) {
	for i := range g.slots {
		g.slots[i].mu.Lock()
	}
	defer func() {
		for i := range g.slots {
			g.slots[i].mu.Unlock()
		}
	}()
	g.all = g.seq.Add(1)
	fn()
}
