package resilience

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/lock"
)

// commandCalls reads INFO commandstats of c's server: calls by command
// (script-internal commands included), INFO itself left out.
func commandCalls(t *testing.T, c *redis.Client) map[string]int64 {
	t.Helper()
	s, err := c.Info(ctxT(t), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int64{}
	for line := range strings.Lines(s) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		for f := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("commandstats %q: %v", line, err)
				}
				calls[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return calls
}

func sum(m map[string]int64) (n int64) {
	for _, v := range m {
		n += v
	}
	return n
}

// delta is after - before, by command, without the zeros.
func delta(before, after map[string]int64) map[string]int64 {
	d := map[string]int64{}
	for k, v := range after {
		if v -= before[k]; v != 0 {
			d[k] = v
		}
	}
	return d
}

func describe(d map[string]int64) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(d)) {
		fmt.Fprintf(&b, " %s=%d", k, d[k])
	}
	return b.String()
}

// TestAwait_forgedAnnouncementsCostNoLook: a holder keeps a key's lock
// (beating, never writing) while a pipeline waits for the value, in Get
// and in GetMany; someone publishes the key on the pipeline's channel
// 5,000 times, one PUBLISH after another, and no value ever lands. Each
// forged announcement must cost Redis about one command, its PUBLISH: a
// waiter whose look found an announcement false is woken by its poll,
// not by every message.
//
// MaxWait is long so that the wait outlives the flood on a loaded machine
// (5,000 round trips take seconds there); the cost per announcement does
// not depend on it.
func TestAwait_forgedAnnouncementsCostNoLook(t *testing.T) {
	waits := map[string]func(ctx context.Context, p *Pipeline[string], loads *atomic.Int32) error{
		"Get": func(ctx context.Context, p *Pipeline[string], loads *atomic.Int32) error {
			_, err := p.Get(ctx, "hot", func(context.Context, string) (string, error) { loads.Add(1); return "v", nil })
			return err
		},
		"GetMany": func(ctx context.Context, p *Pipeline[string], loads *atomic.Int32) error {
			_, err := p.GetMany(ctx, []string{"hot"}, func(_ context.Context, keys []string) (map[string]string, error) {
				loads.Add(1)
				return map[string]string{"hot": "v"}, nil
			})
			return err
		},
	}
	for name, wait := range waits {
		t.Run(name, func(t *testing.T) { forgedFlood(t, name, wait) })
	}
}

func forgedFlood(t *testing.T, name string, wait func(context.Context, *Pipeline[string], *atomic.Int32) error) {
	const forged = 5000
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := ctxT(t) // ended after the cleanup below, which ends the wait
	pipeline := "w-forged-" + name
	holder, err := lock.NewRedis(admin, lock.RedisOptions{Prefix: DefaultPrefix, Namespace: pipeline, Announce: true})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := holder.TryAcquire(ctx, "hot", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	lease.KeepAlive(ctx, nil)
	p := redisPods(t, srv, pipeline, 1, func(b *Builder[string]) *Builder[string] {
		return b.Lock(LockSettings{MaxWait: time.Minute})
	})[0]
	// The waiter's look finds the lock held: the acquire script's TYPE,
	// which nothing else in this test runs.
	types := commandCalls(t, admin)["type"]
	var loads atomic.Int32
	done := make(chan error, 1)
	go func() { done <- wait(ctx, p, &loads) }()
	t.Cleanup(func() {
		// The release announces: the waiter takes the lock and loads.
		if err := lease.Release(ctx); err != nil {
			t.Errorf("Release: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
	returned := func() bool { // the wait returned (and done was read)
		select {
		case err := <-done:
			done <- err // for the cleanup
			return true
		default:
			return false
		}
	}
	within(t, 10*time.Second, "the pipeline's look", func() bool { return commandCalls(t, admin)["type"] > types })

	keys, err := rkey.New(DefaultPrefix, pipeline)
	if err != nil {
		t.Fatal(err)
	}
	before := commandCalls(t, admin)
	start := time.Now()
	for range forged {
		if err := admin.Publish(ctx, keys.Channel(), "hot").Err(); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	d := delta(before, commandCalls(t, admin))
	if returned() {
		t.Fatalf("%s returned during the flood (%d loads): nothing measured", name, loads.Load())
	}
	per := float64(sum(d)) / forged
	t.Logf("FIGURES %s: %d forged announcements in %v: %d commands, %.3f per announcement (its PUBLISH included):%s",
		name, forged, took.Round(time.Millisecond), sum(d), per, describe(d))
	if per > 1.2 {
		t.Fatalf("%s: %.2f Redis commands per forged announcement, want at most 1.2 (its PUBLISH and little more)", name, per)
	}
}
