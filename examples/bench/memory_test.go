package bench

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/maypok86/otter/v2"

	"github.com/herdguard/herdguard/resilience"
)

// BenchmarkL1Memory is the heap an in-process cache holds per entry (V =
// string), at 100k and 1M entries (1k with -short): the live heap after a
// GC once the cache is filled, less the live heap before, divided by the
// entries the cache still holds. Keys and values are built before the
// first measurement, so the bytes are the cache's own: its table, nodes
// and per-entry metadata. Each cache is sized for exactly the entries
// written; "held" is the fraction it kept (a sharded bound may evict
// before the total is reached). ns/op is the time to fill one cache and
// means little.
func BenchmarkL1Memory(b *testing.B) {
	sizes := []int{100_000, 1_000_000}
	if testing.Short() {
		sizes = []int{1_000}
	}
	ctx := context.Background()
	for _, n := range sizes {
		ks, vs := make([]string, n), make([]string, n)
		for i := range ks {
			ks[i] = "user:" + strconv.Itoa(i)
			vs[i] = "value-" + strconv.Itoa(i)
		}
		b.Run(countName(n), func(b *testing.B) {
			runContenders(b, []contender{
				{"pipeline", func(b *testing.B) {
					measureHeap(b, ks, func() (func(string) bool, func()) {
						p, err := resilience.New[string]("mem").Cache(time.Hour).MaxEntries(n).Build()
						if err != nil {
							b.Fatal(err)
						}
						for i, k := range ks {
							if _, err := p.Get(ctx, k, func(context.Context, string) (string, error) { return vs[i], nil }); err != nil {
								b.Fatal(err)
							}
						}
						return func(k string) bool {
							r, err := p.GetResult(ctx, k, refuse)
							return err == nil && r.Source == resilience.SourceL1
						}, func() { _ = p.Close() }
					})
				}},
				{"otter", func(b *testing.B) {
					measureHeap(b, ks, func() (func(string) bool, func()) {
						c := otter.Must(&otter.Options[string, string]{MaximumSize: n, ExpiryCalculator: otter.ExpiryWriting[string, string](time.Hour)})
						for i, k := range ks {
							c.Set(k, vs[i])
						}
						c.CleanUp() // apply the writes still buffered
						return func(k string) bool { _, ok := c.GetIfPresent(k); return ok }, func() { c.StopAllGoroutines() }
					})
				}},
				{"sturdyc", func(b *testing.B) {
					measureHeap(b, ks, func() (func(string) bool, func()) {
						c := newSturdyc[string](n)
						for i, k := range ks {
							c.Set(k, vs[i])
						}
						return func(k string) bool { _, ok := c.Get(k); return ok }, func() {}
					})
				}},
			})
		})
	}
}

var errRefused = errors.New("bench: not loaded")

// refuse is a loader that loads nothing: a lookup with it answers from the
// cache or fails, and never adds an entry.
func refuse(context.Context, string) (string, error) { return "", errRefused }

// measureHeap fills a cache with fill (once per iteration) and reports
// the live heap it adds per entry held, and the fraction of ks held.
// fill returns a lookup, which keeps the cache alive until it has been
// counted, and the function that stops the cache's background work.
func measureHeap(b *testing.B, ks []string, fill func() (has func(string) bool, stop func())) {
	var bytes, held, written float64
	for b.Loop() {
		before := liveHeap()
		has, stop := fill()
		after := liveHeap()
		n := 0
		for _, k := range ks {
			if has(k) {
				n++
			}
		}
		stop()
		bytes += float64(after) - float64(before)
		held += float64(n)
		written += float64(len(ks))
	}
	if held > 0 {
		b.ReportMetric(bytes/held, "B/entry")
		b.ReportMetric(held/written, "held")
	}
}

// liveHeap returns the bytes of live heap objects once the heap has
// settled: GCs run until one frees less than 64 KiB (at most ten), so that
// what a previous cache left for a later cycle (a pool's victims, an
// object a goroutine held a moment longer) is gone before a measurement
// and does not come off the next one.
func liveHeap() uint64 {
	var m runtime.MemStats
	last := uint64(0)
	for i := range 10 {
		runtime.GC()
		runtime.ReadMemStats(&m)
		if i > 0 && last-m.HeapAlloc < 64<<10 {
			break
		}
		last = m.HeapAlloc
	}
	return m.HeapAlloc
}

func countName(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + "M"
	case n >= 1_000 && n%1_000 == 0:
		return strconv.Itoa(n/1_000) + "k"
	}
	return strconv.Itoa(n)
}
