package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestRunFenced_lateWriteRefused: the second load's grant has the higher
// fence, the first grant's late write is refused, and the row keeps the
// second load's value under its fence.
func TestRunFenced_lateWriteRefused(t *testing.T) {
	defer goleak.VerifyNone(t)
	url := databaseURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	rep, err := runFenced(ctx, url, &out)
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if rep.First <= 0 || rep.Second <= rep.First {
		t.Fatalf("fences %d then %d, want positive and growing", rep.First, rep.Second)
	}
	if rep.LateLanded {
		t.Error("the first grant's late write landed over the second's")
	}
	if want := "report 7, load 2"; rep.Value != want || rep.Fence != rep.Second {
		t.Errorf("row %q under fence %d, want %q under %d", rep.Value, rep.Fence, want, rep.Second)
	}
}
