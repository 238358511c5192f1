package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// runOne runs one round of c's pods on key (with cfg.Keys, on the burst of
// keys named after it) and gathers its figures. chaos, if not nil, is
// called at the round's start.
func runOne(ctx context.Context, c *contender, admin *redis.Client, cfg Config, round int, key string, chaos func()) (RoundStats, error) {
	f := c.fleet
	keys := roundKeys(key, cfg.Keys)
	st := RoundStats{Round: round, Mode: c.mode, Key: key, Keys: len(keys), Pods: f.Len(),
		Callers: f.Len() * len(keys) * cfg.Callers, LoadMS: ms(cfg.Load),
		Sources: map[string]int{}, Values: map[string]int{}}
	before := commandCalls(ctx, admin)
	start := time.Now().Add(50 * time.Millisecond) // time for every pod to hear "go"
	sent := make([]bool, f.Len())
	for i := range f.Len() {
		if err := f.send(i, command{Op: "round", Key: key, Keys: cfg.Keys, Start: start.UnixNano()}); err != nil {
			st.PodErrors = append(st.PodErrors, fmt.Sprintf("pod %d: %v", i, err))
			continue
		}
		sent[i] = true
	}
	if chaos != nil {
		time.AfterFunc(time.Until(start), chaos)
	}
	var lat []int64
	deadline := time.Now().Add(cfg.RoundTimeout)
	for i := range f.Len() {
		if !sent[i] {
			continue
		}
		r, err := f.Result(i, key, max(time.Until(deadline), time.Millisecond))
		if err != nil {
			st.PodErrors = append(st.PodErrors, err.Error())
			continue
		}
		lat = append(lat, r.LatencyUS...)
		st.add(i, r)
	}
	// Callers whose pod never answered count as errors.
	st.Errors += st.Callers - st.Answered
	if after := commandCalls(ctx, admin); before >= 0 && after >= before {
		st.RedisCommands = after - before
	} else {
		st.RedisCommands = -1
	}
	// After the commandstats read: the scan is the harness's, not the pods'.
	st.lockKeys(ctx, admin, c.lockPattern())
	st.perKey(f, keys)
	st.P50ms, st.P99ms, st.Maxms = percentile(lat, 0.50), percentile(lat, 0.99), percentile(lat, 1)
	if ctx.Err() != nil {
		return st, ctx.Err()
	}
	return st, nil
}

// add counts pod i's account of the round.
func (st *RoundStats) add(i int, r *podResult) {
	st.Answered += r.Callers
	st.Errors += r.Errors
	st.FailOpen += r.FailOpen
	st.RedisCalls += r.RoundTrips
	st.PodLoads += r.Loads
	if r.BreakerWasOpen || r.BreakerOpened {
		st.BreakerOpenPods++
	}
	if r.BreakerWasOpen {
		st.BreakerOpenAtStart++
	}
	for k, v := range r.Sources {
		st.Sources[k] += v
	}
	for k, v := range r.Values {
		st.Values[k] += v
	}
	if r.ErrSample != "" {
		st.PodErrors = append(st.PodErrors, fmt.Sprintf("pod %d: %s", i, r.ErrSample))
	}
}

// perKey fills the figures counted key by key: loads from the fleet's
// count of load events, splits from the values the callers got.
func (st *RoundStats) perKey(f *Fleet, keys []string) {
	for _, k := range keys {
		n := f.Loads(k)
		st.LoaderCalls += n
		st.MaxLoadsPerKey = max(st.MaxLoadsPerKey, n)
		switch {
		case n == 0:
			st.KeysNotLoaded++
		case n > 1:
			st.KeysMultiLoad++
		}
	}
	distinct := map[string]int{} // key -> distinct values its callers got
	for v := range st.Values {
		distinct[valueKey(v)]++
	}
	for _, n := range distinct {
		if n > 1 {
			st.KeysSplit++
		}
	}
	n := float64(len(keys))
	st.CommandsPerKey, st.RoundTripsPerKey = float64(st.RedisCommands)/n, float64(st.RedisCalls)/n
	if st.RedisCommands < 0 {
		st.CommandsPerKey = -1
	}
	if len(keys) > 1 {
		st.Values = nil // one entry per key at least: too long to report
	}
}

// lockKeys records the lock keys matching pattern at the round's end.
func (st *RoundStats) lockKeys(ctx context.Context, admin *redis.Client, pattern string) {
	n, longest, err := lockKeysLeft(ctx, admin, pattern)
	if err != nil {
		st.LockKeysLeft, st.LockMaxPTTLms = -1, -1
		st.PodErrors = append(st.PodErrors, err.Error())
		return
	}
	st.LockKeysLeft = n
	st.LockMaxPTTLms = ms(longest)
	if longest < 0 {
		st.LockMaxPTTLms = -1
	}
}

// valueKey is the key a loader's value ("key@podN") was loaded for.
func valueKey(v string) string {
	if i := strings.LastIndex(v, "@pod"); i >= 0 {
		return v[:i]
	}
	return v
}

// percentile returns the nearest-rank q-quantile of microsecond samples, in
// milliseconds; NaN for none.
func percentile(us []int64, q float64) float64 {
	if len(us) == 0 {
		return math.NaN()
	}
	s := slices.Clone(us)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	i = min(max(i, 0), len(s)-1)
	return float64(s[i]) / 1000
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
