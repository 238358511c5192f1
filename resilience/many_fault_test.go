package resilience

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/rscript"
)

// TestGetMany_lateRoundTrip_failsOpenItsKeysAlone: Redis holds the first
// round trip of a batch's look, or of its write-back, past the operation
// timeout (CLIENT PAUSE, as a round trip waits behind other processes'
// work) and answers the next ones: only the keys of the late round trip
// fail open. The others load under their locks and are written back, so
// that another pod loads none but keys that failed open. A batch that
// failed open as a whole for one late round trip loaded every key twice.
func TestGetMany_lateRoundTrip_failsOpenItsKeysAlone(t *testing.T) {
	for _, late := range []string{"look", "write-back"} {
		t.Run(late, func(t *testing.T) {
			srv := redistest.Start(t)
			ctx := redistest.Context(t, 30*time.Second)
			admin := srv.Client()
			t.Cleanup(func() { _ = admin.Close() })
			// The pause outlasts the 200 ms operation timeout: the first
			// round trip fails; the second, sent then, is answered once
			// the pause ends. It starts as the round trip goes out (a
			// hook of the first pod's client), however long the batch
			// took to get there on a loaded machine.
			pauser := &pauseNextScripts{pause: func(ctx context.Context) error {
				return admin.Do(ctx, "CLIENT", "PAUSE", 300, "ALL").Err()
			}}
			pods := make([]*Pipeline[string], 2)
			for i := range pods {
				client := srv.Client()
				if i == 0 {
					client.AddHook(pauser)
				}
				pods[i] = build(t, New[string]("many-late").Cache(time.Minute).Redis(client).Lock(LockSettings{}))
			}
			perTrip := rscript.Wave * rscript.MaxKeys
			keys := make([]string, 4*perTrip)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%05d", i)
			}
			first := &batchLoader{}
			load := first.load
			if late == "look" {
				pauser.armed.Store(true)
			} else {
				load = func(ctx context.Context, keys []string) (map[string]string, error) {
					pauser.armed.Store(true)
					return first.load(ctx, keys)
				}
			}
			rs, err := pods[0].GetMany(ctx, keys, load)
			if err != nil {
				t.Fatal(err)
			}
			var open []string
			for k, r := range rs {
				if r.FailedOpen {
					open = append(open, k)
				}
			}
			if err := pauser.err.Load(); err != nil {
				t.Fatalf("CLIENT PAUSE: %v", *err)
			}
			if len(open) == 0 || len(open) > perTrip {
				t.Fatalf("%d of %d keys failed open; want those of the late round trip alone (1 to %d)", len(open), len(keys), perTrip)
			}
			second := &batchLoader{}
			if _, err := pods[1].GetMany(ctx, keys, second.load); err != nil {
				t.Fatal(err)
			}
			for _, k := range slices.Concat(second.snapshot()...) {
				if !slices.Contains(open, k) {
					t.Fatalf("the second pod loaded %s, which the first wrote back", k)
				}
			}
			t.Logf("%d keys failed open, the second pod loaded %d", len(open), len(slices.Concat(second.snapshot()...)))
		})
	}
}

// pauseNextScripts is a hook of a go-redis client: once armed, the next
// round trip of scripts it sends (a batch's look or write-back, in waves
// of EVALSHA) first runs pause, then goes out.
type pauseNextScripts struct {
	armed atomic.Bool
	pause func(ctx context.Context) error
	err   atomic.Pointer[error] // pause's error, if it failed
}

func (h *pauseNextScripts) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pauseNextScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *pauseNextScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() == "evalsha" && h.armed.CompareAndSwap(true, false) {
			if err := h.pause(ctx); err != nil {
				h.err.Store(&err)
			}
		}
		return next(ctx, cmds)
	}
}
