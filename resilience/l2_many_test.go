package resilience

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend/backendtest"
	"github.com/herdguard/herdguard/internal/rcache"
)

// A batch's read without Lock keeps a key's stale copy, which the
// fallback chain serves when the load fails, and serves a fresh one from
// L2 without a load.
func TestGetMany_readWithoutLockKeepsStale(t *testing.T) {
	ctx := context.Background()
	cause := errors.New("db down")
	var mem backendtest.Memory
	p := build(t, New[string]("stale-nolock").Cache(time.Minute).Jitter(0).Stale(time.Hour).Backend(&mem))
	// L2 holds a stale copy of s (stored with a TTL already past) and a
	// fresh one of f.
	stale := p.newEntry("v:stale", false, 0, 0)
	stale.Expires = time.Now().Add(-time.Second)
	fresh := p.newEntry("v:fresh", false, 0, 0)
	if _, err := p.l2.SetMany(ctx, []rcache.Write[string]{{Key: "s", Entry: stale}, {Key: "f", Entry: fresh}}); err != nil {
		t.Fatal(err)
	}
	l := &batchLoader{fail: cause}
	rs, err := p.GetMany(ctx, []string{"s", "f"}, l.load)
	if err != nil {
		t.Fatalf("GetMany: %v", err)
	}
	if r := rs["s"]; r.Source != SourceStale || r.Value != "v:stale" || !errors.Is(r.Cause, cause) {
		t.Errorf("s: %+v; want the stale copy, after the failed load", r)
	}
	if r := rs["f"]; r.Source != SourceL2 || r.Value != "v:fresh" {
		t.Errorf("f: %+v; want the fresh copy from L2", r)
	}
	if calls := l.snapshot(); len(calls) != 1 || len(calls[0]) != 1 || calls[0][0] != "s" {
		t.Errorf("loader calls %v; want one, of s", calls)
	}
}
