package resilience

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/herdguard/herdguard/internal/redistest"
)

// TestScripts_unknownToRedis_burstSendsNoBodies: a Redis that does not
// know the pipeline's scripts (a new server, or one restarted: SCRIPT
// FLUSH here, twice) meets bursts of every kind of call: 300 cold keys in
// Get, 300 in one GetMany, 100 Sets and 100 Invalidates. No script body
// travels (no EVAL: a thousand bodies to hash held such a burst past its
// operation timeout and opened the Redis breaker), each script is loaded
// a few times at most, and no call fails open.
func TestScripts_unknownToRedis_burstSendsNoBodies(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := ctxT(t)
	p := redisPods(t, srv, "scripts", 1, nil)[0]
	load := func(_ context.Context, key string) (string, error) { return "v-" + key, nil }
	loadMany := func(_ context.Context, keys []string) (map[string]string, error) {
		m := make(map[string]string, len(keys))
		for _, k := range keys {
			m[k] = "v-" + k
		}
		return m, nil
	}
	for round := range 2 {
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		before := commandCalls(t, admin)
		var wg sync.WaitGroup
		errs := make(chan error, 600)
		for i := range 300 {
			wg.Go(func() {
				_, err := p.Get(ctx, fmt.Sprintf("get-%d-%d", round, i), load)
				errs <- err
			})
		}
		keys := make([]string, 300)
		for i := range keys {
			keys[i] = fmt.Sprintf("many-%d-%d", round, i)
		}
		wg.Go(func() {
			_, err := p.GetMany(ctx, keys, loadMany)
			errs <- err
		})
		for i := range 100 {
			wg.Go(func() { errs <- p.Set(ctx, fmt.Sprintf("set-%d-%d", round, i), "s") })
			wg.Go(func() { errs <- p.Invalidate(ctx, fmt.Sprintf("get-%d-%d", round, i)) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		d := delta(before, commandCalls(t, admin))
		t.Logf("round %d:%s", round, describe(d))
		if n := d["eval"] + d["eval_ro"]; n != 0 {
			t.Errorf("round %d: %d EVAL commands (script bodies sent), want none", round, n)
		}
		// Six scripts (acquire and set, each for a key and for a batch,
		// write, invalidate), each loaded by
		// the callers that met NOSCRIPT together: a few loads each, where
		// one per caller would be hundreds.
		if n := d["script|load"]; n < 1 || n > 50 {
			t.Errorf("round %d: %d SCRIPT LOADs, want between 1 and 50", round, n)
		}
	}
	if s := p.Stats(); s.FailedOpen != 0 {
		t.Errorf("%d calls failed open, want none", s.FailedOpen)
	}
}
