package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/herdguard/herdguard/resilience"
)

// TestRunBatch_oneQueryForTheMisses: against the real PostgreSQL, each
// batch sends one `WHERE id = ANY($1)` query for exactly its misses, and
// none when every key is cached (rows and missing rows alike).
func TestRunBatch_oneQueryForTheMisses(t *testing.T) {
	defer goleak.VerifyNone(t)
	url := databaseURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	rounds, err := runBatch(ctx, url, &out)
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rounds) != 3 {
		t.Fatalf("%d batches, want 3", len(rounds))
	}
	for i, want := range []struct {
		queries  int64
		queried  int
		loader   int
		l1       int
		notFound int
	}{
		{1, 100, 100, 0, 0},
		{1, 100, 100, 100, 10}, // 100 cached; 90 new rows and 10 ids with none
		{0, 0, 0, 200, 10},
	} {
		r := rounds[i]
		if r.Queries != want.queries || r.Queried != want.queried || r.Errors != 0 {
			t.Errorf("batch %d: %d queries for %d ids, %d errors; want %d for %d, none", i+1, r.Queries, r.Queried, r.Errors, want.queries, want.queried)
		}
		if r.Sources[resilience.SourceLoader] != want.loader || r.Sources[resilience.SourceL1] != want.l1 || r.NotFound != want.notFound {
			t.Errorf("batch %d: sources %v, %d not found; want loader=%d l1=%d, %d not found", i+1, r.Sources, r.NotFound, want.loader, want.l1, want.notFound)
		}
	}
}
