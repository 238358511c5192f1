package resilience

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

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
			pods := make([]*Pipeline[string], 2)
			for i := range pods {
				pods[i] = build(t, New[string]("many-late").Cache(time.Minute).Redis(srv.Client()).Lock(LockSettings{}))
			}
			perTrip := rscript.Wave * rscript.MaxKeys
			keys := make([]string, 4*perTrip)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%05d", i)
			}
			admin := srv.Client()
			t.Cleanup(func() { _ = admin.Close() })
			// The pause outlasts the 200 ms operation timeout: the first
			// round trip fails; the second, sent then, is answered once
			// the pause ends.
			pause := func(ctx context.Context) error { return admin.Do(ctx, "CLIENT", "PAUSE", 300, "ALL").Err() }
			first := &batchLoader{}
			load := first.load
			if late == "look" {
				if err := pause(ctx); err != nil {
					t.Fatal(err)
				}
			} else {
				load = func(ctx context.Context, keys []string) (map[string]string, error) {
					if err := pause(ctx); err != nil {
						return nil, err
					}
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
