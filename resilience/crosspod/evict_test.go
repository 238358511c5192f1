package crosspod_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/rkey"
)

const (
	// evictHeadroom is how far above its current use Redis's maxmemory is
	// set: a few hundred filler keys fill it, then every write evicts.
	evictHeadroom = 512 << 10
	fillerBatch   = 200
	fillerValue   = 1 << 10
	// fillerTTL outlives every key of the lock (the fence counter lives a
	// day past its last grant), so volatile-ttl evicts those first.
	fillerTTL = 48 * time.Hour
	// evictBound bounds the filling: evicting a few keys among thousands
	// takes well under a second.
	evictBound = time.Minute
)

// evict returns a fault that sets maxmemory just above Redis's use with
// policy, writes filler keys until every key of the namespace that the
// policy may evict has been evicted, then lifts maxmemory and deletes the
// fillers.
func evict(policy string) keyLoss {
	return func(ctx context.Context, t *testing.T, _ *redistest.Server, admin *redis.Client, name string) {
		t.Helper()
		used, err := infoInt(ctx, admin, "memory", "used_memory")
		if err != nil {
			t.Fatal(err)
		}
		evictedBefore, _ := infoInt(ctx, admin, "stats", "evicted_keys")
		for _, kv := range [][2]string{{"maxmemory-policy", policy}, {"maxmemory", strconv.FormatInt(used+evictHeadroom, 10)}} {
			if err := admin.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
				t.Fatalf("CONFIG SET %s %s: %v", kv[0], kv[1], err)
			}
		}
		// Every key of the namespace the policy may evict must be seen
		// gone once; a key written again later (by a pod) does not count.
		pending := evictable(ctx, t, admin, name, policy)
		fillers := 0
		for deadline := time.Now().Add(evictBound); len(pending) > 0 && time.Now().Before(deadline); {
			fill(ctx, t, admin, fillers, policy == "volatile-ttl")
			fillers += fillerBatch
			pending = stillThere(ctx, t, admin, pending)
		}
		if err := admin.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
			t.Fatal(err)
		}
		for n := 0; n < fillers; n += fillerBatch {
			keys := make([]string, 0, fillerBatch)
			for j := n; j < n+fillerBatch; j++ {
				keys = append(keys, "filler:"+strconv.Itoa(j))
			}
			if err := admin.Unlink(ctx, keys...).Err(); err != nil {
				t.Fatal(err)
			}
		}
		evicted, _ := infoInt(ctx, admin, "stats", "evicted_keys")
		if len(pending) > 0 {
			t.Fatalf("%s: %d filler keys did not evict %v", policy, fillers, pending)
		}
		t.Logf("%s: %d filler keys evicted %d keys, the namespace's among them", policy, fillers, evicted-evictedBefore)
	}
}

// evictable lists the namespace's keys that policy may evict: all of them
// for an allkeys policy, those with an expiry for a volatile one. KEYS and
// PTTL do not touch a key's LRU clock.
func evictable(ctx context.Context, t *testing.T, admin *redis.Client, name, policy string) []string {
	t.Helper()
	ks, err := rkey.New("", name)
	if err != nil {
		t.Fatal(err)
	}
	// Every key of the namespace starts with the base of key "" less its
	// closing brace.
	keys, err := admin.Keys(ctx, strings.TrimSuffix(ks.Base(""), "}")+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(policy, "volatile") {
		return keys
	}
	var out []string
	for _, k := range keys {
		if d, err := admin.PTTL(ctx, k).Result(); err == nil && d > 0 {
			out = append(out, k)
		}
	}
	return out
}

// stillThere returns the keys that exist. EXISTS does not touch a key's
// LRU clock.
func stillThere(ctx context.Context, t *testing.T, admin *redis.Client, keys []string) []string {
	t.Helper()
	var out []string
	for _, k := range keys {
		n, err := admin.Exists(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			out = append(out, k)
		}
	}
	return out
}

// fill writes one batch of filler keys, numbered from n.
func fill(ctx context.Context, t *testing.T, admin *redis.Client, n int, expire bool) {
	t.Helper()
	ttl := time.Duration(0)
	if expire {
		ttl = fillerTTL
	}
	val := strings.Repeat("x", fillerValue)
	pipe := admin.Pipeline()
	for j := n; j < n+fillerBatch; j++ {
		pipe.Set(ctx, "filler:"+strconv.Itoa(j), val, ttl)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("filler keys: %v", err)
	}
}

// infoInt returns one integer field of one INFO section.
func infoInt(ctx context.Context, c *redis.Client, section, field string) (int64, error) {
	info, err := c.Info(ctx, section).Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, nil
}
