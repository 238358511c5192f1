package main

import (
	"context"
	"errors"
	"time"

	"github.com/bsm/redislock"
	gocache "github.com/go-redis/cache/v9"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/herdguard/herdguard/resilience"
)

// peerPrefix is the prefix of the Redis keys of the modes other than
// pipeline, for a run's namespace.
func peerPrefix(ns string) string { return "stampede:" + ns + ":" }

// valueTTL is how long the peers keep a value in Redis, as the pipeline's
// Cache(time.Minute) does.
const valueTTL = time.Minute

// gocacheLocalSize is the size of go-redis/cache's local TinyLFU cache when
// it is on: more than a run's keys.
const gocacheLocalSize = 100_000

// gocachePeer is github.com/go-redis/cache's Once: a single-flight per
// process around "read Redis (and the local cache, if on), else load and
// write". It has no lock across processes, so every process that misses
// loads. Once swallows Redis errors (a failed read loads, a failed write is
// dropped), so its calls never report failing open.
type gocachePeer struct {
	c      *gocache.Cache
	prefix string
}

func newGocachePeer(client *redis.Client, prefix string, local bool) *gocachePeer {
	opt := &gocache.Options{Redis: client}
	if local {
		opt.LocalCache = gocache.NewTinyLFU(gocacheLocalSize, valueTTL)
	}
	return &gocachePeer{c: gocache.New(opt), prefix: prefix}
}

func (g *gocachePeer) get(ctx context.Context, key string, load resilience.LoadFunc[string]) (string, string, bool, error) {
	var v string
	loaded := false // set by Do, which only the flight's leader runs, on its own goroutine
	err := g.c.Once(&gocache.Item{Ctx: ctx, Key: g.prefix + key, Value: &v, TTL: valueTTL,
		Do: func(it *gocache.Item) (any, error) {
			loaded = true
			return load(it.Context(), key)
		}})
	if err != nil {
		return "", "none", false, err
	}
	if loaded {
		return v, "loader", false, nil
	}
	return v, "cached", false, nil // Redis, the local cache or the leader's load: Once does not say
}

// Backoff of the lock recipe's Obtain: 16 ms doubling to 256 ms, 8 retries
// (16+16+16+32+64+128+256+256 ms: about 0.8 s), as redislock's
// documentation suggests; no jitter, as redislock has none.
const (
	recipeBackoffMin = 16 * time.Millisecond
	recipeBackoffMax = 256 * time.Millisecond
	recipeRetries    = 8
	recipePoll       = 50 * time.Millisecond
)

// lockRecipe is the usual recipe on github.com/bsm/redislock: one
// singleflight.Group per process, so that each process asks Redis once per
// key. The flight reads the value; on a miss it obtains the lock, retrying
// with exponential backoff. Granted, it reads the value again (another
// process may have written it meanwhile), else loads, writes the value with
// a TTL and releases. Not granted, it reads the value every 50 ms up to the
// wait budget, then loads unlocked and writes. A Redis error loads unlocked
// (failing open).
type lockRecipe struct {
	client      *redis.Client
	locks       *redislock.Client
	group       singleflight.Group
	prefix      string
	lease, wait time.Duration
}

func newLockRecipe(client *redis.Client, prefix string, l lockSettings) *lockRecipe {
	l = lockDefaultsForReport(l)
	return &lockRecipe{client: client, locks: redislock.New(client), prefix: prefix, lease: l.Lease, wait: recipeWait}
}

// recipeOutcome is what one flight of the recipe gives its callers.
type recipeOutcome struct {
	value, source string
	failOpen      bool
}

func (r *lockRecipe) get(ctx context.Context, key string, load resilience.LoadFunc[string]) (string, string, bool, error) {
	// The flight runs on the first caller's context, as the recipe
	// usually does: if that caller leaves, the others get its error.
	v, err, _ := r.group.Do(key, func() (any, error) { return r.fetch(ctx, key, load) })
	o, _ := v.(recipeOutcome)
	if err != nil {
		return "", "none", o.failOpen, err
	}
	return o.value, o.source, o.failOpen, nil
}

func (r *lockRecipe) fetch(ctx context.Context, key string, load resilience.LoadFunc[string]) (recipeOutcome, error) {
	vkey := r.prefix + key
	v, err := r.client.Get(ctx, vkey).Result()
	switch {
	case err == nil:
		return recipeOutcome{v, "l2", false}, nil
	case !errors.Is(err, redis.Nil):
		return r.loadAndSet(ctx, key, load, true)
	}
	// A fresh strategy per call: LimitRetry counts the retries it granted.
	retry := redislock.LimitRetry(redislock.ExponentialBackoff(recipeBackoffMin, recipeBackoffMax), recipeRetries)
	l, err := r.locks.Obtain(ctx, vkey+":lock", r.lease, &redislock.Options{RetryStrategy: retry})
	switch {
	case err == nil:
		defer func() {
			// Release even if the caller has left: a lock left behind holds
			// every other process for a whole lease.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = l.Release(rctx)
		}()
		v, err := r.client.Get(ctx, vkey).Result()
		if err == nil {
			return recipeOutcome{v, "waited", false}, nil
		}
		return r.loadAndSet(ctx, key, load, !errors.Is(err, redis.Nil))
	case errors.Is(err, redislock.ErrNotObtained):
		return r.pollThenLoad(ctx, key, load)
	case ctx.Err() != nil:
		return recipeOutcome{source: "none"}, ctx.Err()
	default:
		return r.loadAndSet(ctx, key, load, true)
	}
}

// pollThenLoad reads the value every recipePoll until it appears or the
// wait budget is spent, then loads unlocked.
func (r *lockRecipe) pollThenLoad(ctx context.Context, key string, load resilience.LoadFunc[string]) (recipeOutcome, error) {
	deadline := time.Now().Add(r.wait)
	t := time.NewTimer(recipePoll)
	defer t.Stop()
	for time.Now().Before(deadline) {
		select {
		case <-t.C:
		case <-ctx.Done():
			return recipeOutcome{source: "none"}, ctx.Err()
		}
		v, err := r.client.Get(ctx, r.prefix+key).Result()
		switch {
		case err == nil:
			return recipeOutcome{v, "waited", false}, nil
		case !errors.Is(err, redis.Nil):
			return r.loadAndSet(ctx, key, load, true)
		}
		t.Reset(recipePoll)
	}
	return r.loadAndSet(ctx, key, load, false) // wait budget spent: load unlocked
}

// loadAndSet loads key and writes the value; a failed write fails open.
func (r *lockRecipe) loadAndSet(ctx context.Context, key string, load resilience.LoadFunc[string], failOpen bool) (recipeOutcome, error) {
	v, err := load(ctx, key)
	if err != nil {
		return recipeOutcome{source: "loader", failOpen: failOpen}, err
	}
	if err := r.client.Set(ctx, r.prefix+key, v, valueTTL).Err(); err != nil {
		failOpen = true
	}
	return recipeOutcome{v, "loader", failOpen}, nil
}
