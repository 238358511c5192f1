package gens

import (
	"strconv"
	"sync"
	"testing"
)

// filled reports whether g's Fill of key under stamp ran its fn.
func filled(g *Table, key string, stamp uint64) bool {
	ran := false
	g.Fill(key, stamp, func() { ran = true })
	return ran
}

// otherSlot returns a key whose slot is not key's.
func otherSlot(t *testing.T, g *Table, key string) string {
	t.Helper()
	for i := range 100 {
		k := "other-" + strconv.Itoa(i)
		if g.slot(k) != g.slot(key) {
			return k
		}
	}
	t.Fatal("no key of another slot in 100")
	return ""
}

// TestTable_Fill_skippedAfterWriteToKey: a fill whose load began before a
// write to its key is skipped; one that began after it runs.
func TestTable_Fill_skippedAfterWriteToKey(t *testing.T) {
	var g Table
	stamp := g.Stamp()
	if !filled(&g, "k", stamp) {
		t.Fatal("a fill with no write since its stamp was skipped")
	}
	g.Write("k", func() {})
	if filled(&g, "k", stamp) {
		t.Fatal("a fill stamped before a write to its key ran")
	}
	if !filled(&g, "k", g.Stamp()) {
		t.Fatal("a fill stamped after the write was skipped")
	}
}

// TestTable_Fill_notSkippedByWriteToAnotherSlot: a write to a key of
// another slot leaves the fill alone.
func TestTable_Fill_notSkippedByWriteToAnotherSlot(t *testing.T) {
	var g Table
	other := otherSlot(t, &g, "k")
	stamp := g.Stamp()
	g.Write(other, func() {})
	if !filled(&g, "k", stamp) {
		t.Fatal("a write to a key of another slot skipped the fill")
	}
	if filled(&g, other, stamp) {
		t.Fatal("the written key's own fill ran")
	}
}

// TestTable_WriteAll_skipsEveryFillStampedBefore: a write to every key
// skips the fills of every key stamped before it, and none after.
func TestTable_WriteAll_skipsEveryFillStampedBefore(t *testing.T) {
	var g Table
	keys := []string{"k", otherSlot(t, &g, "k"), "a", "b", "c"}
	stamp := g.Stamp()
	ran := false
	g.WriteAll(func() { ran = true })
	if !ran {
		t.Fatal("WriteAll did not run its fn")
	}
	for _, k := range keys {
		if filled(&g, k, stamp) {
			t.Fatalf("the fill of %q stamped before WriteAll ran", k)
		}
		if !filled(&g, k, g.Stamp()) {
			t.Fatalf("the fill of %q stamped after WriteAll was skipped", k)
		}
	}
}

// TestTable_concurrentWriteAndFill: writes (of one key and of all) and
// fills run at once; each fill's fn finds no write since its stamp, and
// the fns of writes and fills to the key never overlap (under -race, the
// unguarded variable they share says so).
func TestTable_concurrentWriteAndFill(t *testing.T) {
	var g Table
	var (
		written uint64 // seq of the last write to "k", set under its slot
		fills   int
	)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 500 {
				if w == 0 && i%50 == 0 {
					g.WriteAll(func() { written = g.Stamp() })
					continue
				}
				g.Write("k", func() { written = g.Stamp() })
			}
		})
	}
	errs := make(chan string, 4)
	for range 4 {
		wg.Go(func() {
			for range 500 {
				stamp := g.Stamp()
				g.Fill("k", stamp, func() {
					if written > stamp {
						select {
						case errs <- "a fill ran after a write since its stamp":
						default:
						}
					}
					fills++
				})
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	t.Logf("%d fills of 2000 ran", fills)
}
