package resilience

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/herdguard/herdguard/internal/redistest"
)

// TestColdGetPath is what scripts/coldpath.go measures: which files of
// package resilience (and of internal/coord) a cold Get with Redis and
// Lock runs, by the coverage of one Build and Close
// (HERDGUARD_COLD_PATH=base) against the same with one cold Get between
// them (HERDGUARD_COLD_PATH=get). It is skipped otherwise.
func TestColdGetPath(t *testing.T) {
	mode := os.Getenv("HERDGUARD_COLD_PATH")
	if mode == "" {
		t.Skip("run by scripts/coldpath.go")
	}
	s := redistest.Start(t)
	p := build(t, New[string]("coldpath").Cache(time.Hour).Redis(s.Client()).Lock(LockSettings{}))
	if mode == "get" {
		c := &counter{}
		if r, err := p.GetResult(context.Background(), "cold", c.load); err != nil || r.Source != SourceLoader {
			t.Fatalf("cold Get: %+v, %v; want a load", r, err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}
