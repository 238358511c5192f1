package podproc_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"sync"
	"testing"

	"github.com/herdguard/herdguard/internal/podproc"
)

// TestWriter_Emit_linesWhole: lines emitted from many goroutines at once
// come out whole, one JSON value each.
func TestWriter_Emit_linesWhole(t *testing.T) {
	var buf bytes.Buffer
	w := podproc.NewWriter(&buf)
	type ev struct {
		G, I int
		Pad  string
	}
	const goroutines, each = 8, 200
	pad := string(bytes.Repeat([]byte("x"), 5000))
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				w.Emit(ev{G: g, I: i, Pad: pad})
			}
		})
	}
	wg.Wait()
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		var e ev
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Pad != pad {
			t.Fatalf("line %d is not one whole event: %v", n, err)
		}
		n++
	}
	if n != goroutines*each {
		t.Fatalf("%d lines, want %d", n, goroutines*each)
	}
}
