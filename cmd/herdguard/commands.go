package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/lock"
)

// inspectReport is inspect's JSON output.
type inspectReport struct {
	Pipeline string     `json:"pipeline"`
	Key      string     `json:"key"`
	Value    valueState `json:"value"`
	Lock     lockState  `json:"lock"`
}

func inspect(ctx context.Context, rdb *redis.Client, keys rkey.Space, o options, key string, out io.Writer) error {
	v, l, err := readKey(ctx, rdb, keys, o, key)
	if err != nil {
		return err
	}
	if o.showValue && v.entryPayload != nil {
		s := string(v.entryPayload)
		v.Value = &s
	}
	r := inspectReport{Pipeline: o.pipeline, Key: key, Value: v, Lock: l}
	if o.json {
		return writeJSON(out, r)
	}
	return writeInspect(out, r)
}

// scanCount is the COUNT hint of each SCAN step.
const scanCount = 1000

// locksReport is locks' JSON output.
type locksReport struct {
	Pipeline string      `json:"pipeline"`
	Locks    []lockState `json:"locks"`
}

func locks(ctx context.Context, rdb *redis.Client, keys rkey.Space, o options, _ string, out io.Writer) error {
	var found []lockState
	var cursor uint64
	for {
		names, next, err := rdb.Scan(ctx, cursor, keys.LockPattern(), scanCount).Result()
		if err != nil {
			return fmt.Errorf("herdguard: scan: %w", err)
		}
		ls, err := readLocks(ctx, rdb, keys, names)
		if err != nil {
			return err
		}
		found = append(found, ls...)
		if cursor = next; cursor == 0 {
			break
		}
	}
	// Oldest beat first; locks without a beat (foreign) before them all.
	slices.SortStableFunc(found, func(a, b lockState) int {
		return int(age(b) - age(a))
	})
	r := locksReport{Pipeline: o.pipeline, Locks: found}
	if r.Locks == nil {
		r.Locks = []lockState{}
	}
	if o.json {
		return writeJSON(out, r)
	}
	return writeLocks(out, r)
}

func age(l lockState) int64 {
	if l.BeatAgeMs == nil {
		return 1 << 62
	}
	return *l.BeatAgeMs
}

// readLocks reads the locks at names in one round trip; a lock released
// since SCAN saw it is left out.
func readLocks(ctx context.Context, rdb *redis.Client, keys rkey.Space, names []string) ([]lockState, error) {
	if len(names) == 0 {
		return nil, nil
	}
	cmds := make([]lockCmds, len(names))
	var clock *redis.TimeCmd
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		clock = p.Time(ctx)
		for i, n := range names {
			cmds[i] = queueLock(p, ctx, n)
		}
		return nil
	})
	if err != nil && !redis.HasErrorPrefix(err, "WRONGTYPE") {
		return nil, fmt.Errorf("herdguard: read locks: %w", err)
	}
	nowMs, err := serverMillis(clock)
	if err != nil {
		return nil, fmt.Errorf("herdguard: read clock: %w", err)
	}
	var out []lockState
	for i, n := range names {
		key, ok := keys.KeyOfLock(n)
		if !ok {
			continue
		}
		l, err := cmds[i].state(nowMs)
		if err != nil {
			return nil, fmt.Errorf("herdguard: read lock: %w", err)
		}
		if l.Held {
			l.Key = key
			out = append(out, l)
		}
	}
	return out, nil
}

// subscribersReport is subscribers' JSON output.
type subscribersReport struct {
	Pipeline    string `json:"pipeline"`
	Channel     string `json:"channel"`
	Subscribers int64  `json:"subscribers"`
}

func subscribers(ctx context.Context, rdb *redis.Client, keys rkey.Space, o options, _ string, out io.Writer) error {
	ch := keys.Channel()
	m, err := rdb.PubSubNumSub(ctx, ch).Result()
	if err != nil {
		return fmt.Errorf("herdguard: pubsub numsub: %w", err)
	}
	r := subscribersReport{Pipeline: o.pipeline, Channel: ch, Subscribers: m[ch]}
	if o.json {
		return writeJSON(out, r)
	}
	_, err = fmt.Fprintf(out, "pipeline     %s\nchannel      %s\nsubscribers  %d\n", r.Pipeline, r.Channel, r.Subscribers)
	return err
}

// invalidateReport is invalidate's JSON output.
type invalidateReport struct {
	Pipeline string `json:"pipeline"`
	Key      string `json:"key"`
	Fence    int64  `json:"fence"`
	HoldMs   int64  `json:"hold_ms"`
}

// invalidate runs the cache's invalidate script, as a pipeline's
// Invalidate does: a fenced tombstone, the lock revoked, and the
// announcement every pipeline instance hears (and drops its copy on).
func invalidate(ctx context.Context, rdb *redis.Client, _ rkey.Space, o options, key string, out io.Writer) error {
	store, err := rcache.NewRedis[[]byte](rdb, rcache.RedisOptions{Prefix: o.prefix, Namespace: o.pipeline, Codec: rawCodec{}})
	if err != nil {
		return fmt.Errorf("herdguard: %w", err)
	}
	// A random origin: no pipeline instance takes the announcement for its
	// own write and keeps its copy.
	origin := make([]byte, rkey.OriginLen)
	_, _ = rand.Read(origin)
	fence, err := store.Invalidate(ctx, key, rcache.WriteOptions{
		Origin: string(origin), FenceRetention: lock.DefaultFenceRetention, Hold: o.hold})
	if err != nil {
		return fmt.Errorf("herdguard: %w", err)
	}
	r := invalidateReport{Pipeline: o.pipeline, Key: key, Fence: fence, HoldMs: o.hold.Milliseconds()}
	if o.json {
		return writeJSON(out, r)
	}
	_, err = fmt.Fprintf(out, "invalidated  %s\nfence        %d\nhold         %v\n", key, fence, o.hold)
	return err
}

func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
