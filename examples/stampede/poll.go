package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/resilience"
)

// pollLock is one comparison: the distributed lock as cachekit and many
// others do it. Every caller (no single-flight) reads the value; on a miss
// it tries SET NX PX; the winner loads, writes and deletes the lock; the
// others retry every 100 ms, reading the value each time, and after the
// wait budget (recipeWait) load on their own. A Redis error fails open.
type pollLock struct {
	client *redis.Client
	lease  time.Duration
	prefix string
}

// recipeWait is the wait budget of the poll and redislock recipes: how
// long a caller that lost the race waits for the value before it loads
// without the lock. A fixed budget is what these recipes have; the
// pipeline's waiters follow the holder's heartbeat instead, up to MaxWait.
const recipeWait = 5 * time.Second

const pollInterval = 100 * time.Millisecond

var releaseScript = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func (l *pollLock) get(ctx context.Context, key string, load resilience.LoadFunc[string]) (string, string, bool, error) {
	vkey, lkey := l.prefix+key, l.prefix+key+":lock"
	lease := l.lease
	if lease <= 0 {
		lease = resilience.DefaultLockLease
	}
	loadAndSet := func(src string, failOpen bool) (string, string, bool, error) {
		v, err := load(ctx, key)
		if err != nil {
			return "", src, failOpen, err
		}
		if err := l.client.Set(ctx, vkey, v, time.Minute).Err(); err != nil {
			failOpen = true
		}
		return v, src, failOpen, nil
	}
	v, err := l.client.Get(ctx, vkey).Result()
	switch {
	case err == nil:
		return v, "l2", false, nil
	case !errors.Is(err, redis.Nil):
		if ctx.Err() != nil {
			return "", "none", false, ctx.Err()
		}
		return loadAndSet("loader", true)
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	deadline := time.Now().Add(recipeWait)
	for {
		ok, err := l.client.SetNX(ctx, lkey, tok, lease).Result()
		if err != nil {
			if ctx.Err() != nil {
				return "", "none", false, ctx.Err()
			}
			return loadAndSet("loader", true)
		}
		if ok {
			v, src, fo, err := loadAndSet("loader", false)
			_ = releaseScript.Run(context.WithoutCancel(ctx), l.client, []string{lkey}, tok).Err()
			return v, src, fo, err
		}
		t := time.NewTimer(pollInterval)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return "", "none", false, ctx.Err()
		}
		v, err := l.client.Get(ctx, vkey).Result()
		switch {
		case err == nil:
			return v, "waited", false, nil
		case !errors.Is(err, redis.Nil):
			if ctx.Err() != nil {
				return "", "none", false, ctx.Err()
			}
			return loadAndSet("loader", true)
		}
		if time.Now().After(deadline) {
			return loadAndSet("loader", false) // wait budget spent: load unlocked
		}
	}
}
