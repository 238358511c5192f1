package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/lock"
)

func TestLocks_oldestBeatFirst(t *testing.T) {
	ctx := context.Background()
	name := redistest.Namespace(t)
	lk, err := lock.NewRedis(rdb, lock.RedisOptions{Namespace: name, Heartbeat: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	other, err := lock.NewRedis(rdb, lock.RedisOptions{Namespace: name + "-other"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lk.Wait)
	old, err := lk.TryAcquire(ctx, "old{1}*", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Release(ctx) })
	var r locksReport
	eventually(t, "the first lock to age", func() bool {
		cliJSON(t, &r, "locks", "-pipeline", name)
		return len(r.Locks) == 1 && *r.Locks[0].BeatAgeMs > 0
	})
	young, err := lk.TryAcquire(ctx, "young", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = young.Release(ctx) })
	elsewhere, err := other.TryAcquire(ctx, "elsewhere", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = elsewhere.Release(ctx) })

	cliJSON(t, &r, "locks", "-pipeline", name)
	if len(r.Locks) != 2 || r.Locks[0].Key != "old{1}*" || r.Locks[1].Key != "young" ||
		r.Locks[0].Token != old.Token() || r.Locks[1].Fence != young.Fence() {
		t.Fatalf("locks %+v, want old{1}* then young", r.Locks)
	}
	text, _, code := cli(t, "locks", "-redis", srv.Addr(), "-pipeline", name)
	if code != 0 || !strings.Contains(text, old.Token()) || !strings.Contains(text, "2 held locks") ||
		strings.Index(text, "old{1}*") > strings.Index(text, "young") || strings.Contains(text, "elsewhere") {
		t.Fatalf("exit %d, text:\n%s", code, text)
	}
}

func TestLocks_none(t *testing.T) {
	var r locksReport
	cliJSON(t, &r, "locks", "-pipeline", redistest.Namespace(t))
	if r.Locks == nil || len(r.Locks) != 0 {
		t.Fatalf("locks %#v, want an empty list", r.Locks)
	}
}

func TestSubscribers_twoPipelines(t *testing.T) {
	name := redistest.Namespace(t)
	var r subscribersReport
	cliJSON(t, &r, "subscribers", "-pipeline", name)
	if r.Subscribers != 0 || r.Channel != mustKeys(t, name).Channel() {
		t.Fatalf("report %+v before any pipeline", r)
	}
	a, b := newPipeline(t, name), newPipeline(t, name)
	eventually(t, "both pipelines subscribed", func() bool {
		return a.Health().Subscribed && b.Health().Subscribed
	})
	cliJSON(t, &r, "subscribers", "-pipeline", name)
	if r.Subscribers != 2 {
		t.Fatalf("report %+v, want 2 subscribers", r)
	}
	text, _, _ := cli(t, "subscribers", "-redis", srv.Addr(), "-pipeline", name)
	if !hasRow(text, "subscribers 2") {
		t.Fatalf("text:\n%s", text)
	}
}

// TestInvalidate_fencedAndHeard invalidates a key that a pipeline holds in
// its in-process cache while another load holds the lock: the tombstone
// is above every fence, the lock is revoked (its holder writes nothing
// back), and the pipeline hears it and loads again.
func TestInvalidate_fencedAndHeard(t *testing.T) {
	ctx := context.Background()
	name := redistest.Namespace(t)
	p := newPipeline(t, name)
	eventually(t, "pipeline subscribed", func() bool { return p.Health().Subscribed })
	var loads int
	if _, err := p.Get(ctx, "k", load("v1", &loads)); err != nil {
		t.Fatal(err)
	}
	lk, err := lock.NewRedis(rdb, lock.RedisOptions{Namespace: name})
	if err != nil {
		t.Fatal(err)
	}
	holder, err := lk.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	var r invalidateReport
	cliJSON(t, &r, "invalidate", "-pipeline", name, "-hold", "5s", "k")
	if r.Fence <= holder.Fence() || r.HoldMs != 5000 || r.Key != "k" {
		t.Fatalf("report %+v, want a fence above the holder's %d", r, holder.Fence())
	}
	var after inspectReport
	cliJSON(t, &after, "inspect", "-pipeline", name, "k")
	if after.Value.State != stateTombstone || after.Value.Fence != r.Fence || after.Lock.Held {
		t.Fatalf("after invalidate: %+v", after)
	}
	if err := holder.Release(ctx); err == nil {
		t.Fatal("the revoked holder could release")
	}
	eventually(t, "pipeline drops its copy", func() bool {
		v, err := p.Get(ctx, "k", load("v2", &loads))
		return err == nil && v == "v2"
	})
	text, _, code := cli(t, "invalidate", "-redis", srv.Addr(), "-pipeline", name, "k")
	if code != 0 || !hasRow(text, "invalidated k") || !hasRow(text, "hold 30s") {
		t.Fatalf("exit %d, text:\n%s", code, text)
	}
}
