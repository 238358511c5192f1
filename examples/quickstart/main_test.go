package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestRun_oneLoadForAllCallers(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, 300, 50*time.Millisecond); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{"callers:       300", "loader calls:  1\n", "errors:        0", "next call:     source=l1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}
