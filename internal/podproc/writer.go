package podproc

import (
	"encoding/json"
	"io"
	"sync"
)

// Writer is the pod's side of stdout: it writes values as JSON lines,
// one [Writer.Emit] a line, from many goroutines at once.
type Writer struct {
	mu  sync.Mutex // guards enc: one line at a time
	enc *json.Encoder
}

// NewWriter returns a Writer on w, a pod's stdout.
func NewWriter(w io.Writer) *Writer { return &Writer{enc: json.NewEncoder(w)} }

// Emit writes v as one JSON line. A write error is dropped: a parent gone
// away has nothing to hear, and the pod learns of it when its stdin ends.
func (w *Writer) Emit(v any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = w.enc.Encode(v)
}
