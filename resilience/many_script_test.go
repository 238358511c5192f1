package resilience

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/rscript"
)

// A batch's keys cost Redis one script run per rscript.MaxKeys keys, not
// one per key: a GetMany of 1,000 cold keys with Redis and Lock runs 8
// look scripts and 8 write-backs (INFO commandstats), where it ran 2,000;
// each key still costs the commands inside them (its lock's HSET, its
// value's).
func TestGetMany_redis_oneScriptPerBatchOfKeys(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client()
	p, _ := manyPod(t, srv, "many-scripts", nil)
	warmScripts(t, p)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%04d", i)
	}
	before := commandCalls(t, admin)
	rs, err := p.GetMany(context.Background(), keys, (&batchLoader{}).load)
	if err != nil {
		t.Fatal(err)
	}
	for k, r := range rs {
		if r.FailedOpen {
			t.Fatalf("%s failed open: %v", k, r.FailOpenCause)
		}
	}
	d := delta(before, commandCalls(t, admin))
	scripts := int64((len(keys) + rscript.MaxKeys - 1) / rscript.MaxKeys)
	// The look and the write-back; a beat of the leases or a release
	// may add a few runs on a slow machine.
	if n := d["evalsha"]; n < 2*scripts || n > 2*scripts+4 {
		t.Errorf("%d EVALSHA for %d cold keys, want %d (2 per %d keys)%s", n, len(keys), 2*scripts, rscript.MaxKeys, describe(d))
	}
	if n := d["hset"]; n < 2*int64(len(keys)) {
		t.Errorf("%d HSET, want at least %d (each key's lock and value)", n, 2*len(keys))
	}
	t.Logf("FIGURES GetMany of %d cold keys with Redis and Lock:%s", len(keys), describe(d))
}

// On Redis Cluster, a batch script carries only keys of one hash slot
// (CROSSSLOT otherwise): a GetMany of 300 cold keys, spread over the
// slots of three masters, loads each once, writes each back and fails
// none open; a second look finds every value. The pipeline's batcher
// hides the Cluster client from the cache and the lock, which are told.
func TestGetMany_redisCluster_scriptsKeepToASlot(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	p := build(t, New[string]("many-cluster").Cache(time.Minute).Redis(c.Client()).
		Lock(LockSettings{Poll: 50 * time.Millisecond}).RedisOptions(RedisOptions{OpTimeout: 2 * time.Second}))
	keys := make([]string, 300)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%03d", i)
	}
	l := &batchLoader{}
	rs, err := p.GetMany(context.Background(), keys, l.load)
	if err != nil {
		t.Fatal(err)
	}
	for k, r := range rs {
		if r.FailedOpen {
			t.Fatalf("%s failed open: %v", k, r.FailOpenCause)
		}
	}
	if s := sources(rs); s["loader"] != len(keys) {
		t.Fatalf("sources %v, want every key from the loader", s)
	}
	q := build(t, New[string]("many-cluster").Cache(time.Minute).Redis(c.Client()).
		Lock(LockSettings{Poll: 50 * time.Millisecond}).RedisOptions(RedisOptions{OpTimeout: 2 * time.Second}))
	rs, err = q.GetMany(context.Background(), keys, l.load)
	if err != nil {
		t.Fatal(err)
	}
	if s := sources(rs); s["l2"] != len(keys) {
		t.Errorf("second process: sources %v, want every key from l2", s)
	}
	if calls := l.snapshot(); len(calls) != 1 {
		t.Errorf("%d loader calls, want 1", len(calls))
	}
}
