package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/resilience"
)

// Config is one harness run.
type Config struct {
	Pods int
	// Callers is how many goroutines per pod ask for each key at once.
	// default: 64 for one key, 1 with Keys
	Callers int
	// Keys, if not 0, makes each round a burst of that many cold keys, all
	// asked at once in every pod.
	Keys   int
	Load   time.Duration
	Rounds int
	Redis  string // address; "" starts a private redis-server
	// Mode is one mode or several, comma-separated; several take turns,
	// one round each, so that drift in the machine's load hits all alike.
	// default: pipeline
	Mode      string
	Lock      lockSettings
	OpTimeout time.Duration
	// GocacheLocal turns on go-redis/cache's local TinyLFU cache in gocache
	// mode.
	GocacheLocal bool
	// KillRedisAfter, if not 0, SIGKILLs the private Redis that long into
	// the first round; RestartRedisAfter, if not 0, starts it again that
	// long after the kill.
	KillRedisAfter, RestartRedisAfter time.Duration
	// RoundTimeout bounds how long the harness waits for a round's results.
	// default: 2 minutes
	RoundTimeout time.Duration
	Spawn        Spawner
}

// RoundStats is one round's report.
type RoundStats struct {
	Round       int    `json:"round"`
	Mode        string `json:"mode"`
	Key         string `json:"key"`  // the key, or with Keys the stem of key-0 .. key-(N-1)
	Keys        int    `json:"keys"` // cold keys in the round
	Pods        int    `json:"pods"`
	Callers     int    `json:"callers"`
	Answered    int    `json:"answered"` // callers whose pod reported back
	LoaderCalls int    `json:"loader_calls"`
	// PodLoads is the loader calls as the pods counted them; it matches
	// LoaderCalls, which the parent counts key by key from the pods' load
	// events, unless a pod died.
	PodLoads       int `json:"pod_loads"`
	KeysMultiLoad  int `json:"keys_loaded_more_than_once"`
	KeysNotLoaded  int `json:"keys_not_loaded"`
	MaxLoadsPerKey int `json:"max_loads_per_key"`
	// KeysSplit counts keys whose callers did not all get the same value.
	KeysSplit     int   `json:"keys_split"`
	Errors        int   `json:"errors"`
	FailOpen      int   `json:"fail_open"`
	RedisCommands int64 `json:"redis_commands"`    // INFO commandstats delta, script-internal commands included; -1 unknown
	RedisCalls    int64 `json:"redis_round_trips"` // round trips the pods' clients made, a pipeline counting as one
	// CommandsPerKey and RoundTripsPerKey are RedisCommands and RedisCalls
	// over Keys (over 1 without Keys).
	CommandsPerKey   float64 `json:"redis_commands_per_key"`
	RoundTripsPerKey float64 `json:"round_trips_per_key"`
	// LockKeysLeft counts the mode's lock keys found at the round's end
	// (SCAN), -1 if the scan failed; LockMaxPTTLms is the longest time to
	// live among them, -1 if one has none.
	LockKeysLeft  int     `json:"lock_keys_left"`
	LockMaxPTTLms float64 `json:"lock_max_pttl_ms"`
	// BreakerOpenPods counts the pods whose Redis breaker was open at some
	// point in the round (pipeline mode only); BreakerOpenAtStart, those
	// whose breaker was not closed yet when the round began (opened in an
	// earlier round, or the warm-up).
	BreakerOpenPods    int            `json:"breaker_open_pods"`
	BreakerOpenAtStart int            `json:"breaker_open_at_start_pods"`
	P50ms              float64        `json:"p50_ms"`
	P99ms              float64        `json:"p99_ms"`
	Maxms              float64        `json:"max_ms"`
	LoadMS             float64        `json:"load_ms"`
	Sources            map[string]int `json:"sources"`
	// Values maps each value to the callers that got it; left out with
	// Keys, where it would hold every key.
	Values    map[string]int `json:"values,omitempty"`
	PodErrors []string       `json:"pod_errors,omitempty"`
}

func (c *Config) defaults() {
	if c.Pods <= 0 {
		c.Pods = 8
	}
	if c.Callers <= 0 {
		c.Callers = 64
		if c.Keys > 0 {
			c.Callers = 1
		}
	}
	if c.Load <= 0 {
		c.Load = 200 * time.Millisecond
	}
	if c.Rounds <= 0 {
		c.Rounds = 5
	}
	if c.Mode == "" {
		c.Mode = modePipeline
	}
	if c.RoundTimeout <= 0 {
		c.RoundTimeout = 2 * time.Minute
	}
}

// parseModes splits a comma-separated list of modes, refusing unknown
// ones and repeats.
func parseModes(s string) ([]string, error) {
	var modes []string
	for m := range strings.SplitSeq(s, ",") {
		m = strings.TrimSpace(m)
		if !slices.Contains(allModes, m) {
			return nil, fmt.Errorf("stampede: unknown mode %q: want %s", m, strings.Join(allModes, ", "))
		}
		if slices.Contains(modes, m) {
			return nil, fmt.Errorf("stampede: mode %q given twice", m)
		}
		modes = append(modes, m)
	}
	return modes, nil
}

// contender is one mode's fleet and the Redis names its pods use.
type contender struct {
	mode  string
	ns    string // the pods' namespace: pipeline name and key prefix
	fleet *Fleet
}

// Run runs the harness: it starts Redis if asked and a fleet of pods per
// mode, a warm-up round per mode (not reported: it loads the scripts and
// opens the connections; see warmUp), then cfg.Rounds rounds on fresh keys, the modes
// taking turns (round r starting with mode r-1, round-robin), calling
// report after each.
func Run(ctx context.Context, cfg Config, report func(RoundStats)) error {
	cfg.defaults()
	modes, err := parseModes(cfg.Mode)
	if err != nil {
		return err
	}
	if cfg.Spawn == nil {
		s, err := selfSpawner()
		if err != nil {
			return err
		}
		cfg.Spawn = s
	}
	addr := cfg.Redis
	var priv *redistest.Server
	if addr == "" {
		s, closeRedis, err := redistest.New()
		if err != nil {
			return fmt.Errorf("stampede: %w (or pass -redis ADDR)", err)
		}
		defer closeRedis()
		priv, addr = s, s.Addr()
	} else if cfg.KillRedisAfter > 0 {
		return errors.New("stampede: -kill-redis-after needs the private Redis: leave -redis out")
	}
	admin := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer admin.Close()

	var b [6]byte
	_, _ = rand.Read(b[:])
	run := "stampede-" + hex.EncodeToString(b[:]) // fresh namespaces: fresh keys
	var cs []*contender
	defer func() {
		for _, c := range cs {
			_ = c.fleet.Close()
		}
	}()
	for _, mode := range modes {
		c, err := startContender(ctx, cfg, admin, addr, mode, run+"-"+mode)
		if err != nil {
			return err
		}
		cs = append(cs, c)
	}
	for _, c := range cs {
		if err := warmUp(ctx, c, admin, cfg); err != nil {
			return err
		}
	}
	for r := 1; r <= cfg.Rounds; r++ {
		// Each round starts with the next mode, so that none always runs
		// right after the same other one.
		for i := range cs {
			c := cs[(r-1+i)%len(cs)]
			var chaos func()
			if r == 1 && i == 0 && priv != nil && cfg.KillRedisAfter > 0 {
				chaos = func() { killRedisLater(priv, cfg.KillRedisAfter, cfg.RestartRedisAfter) }
			}
			st, err := runOne(ctx, c, admin, cfg, r, fmt.Sprintf("k%d", r), chaos)
			if err != nil {
				return err
			}
			report(st)
		}
	}
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.fleet.Close())
	}
	return errors.Join(errs...)
}

// maxWarmUps bounds the warm-up rounds of a mode.
const maxWarmUps = 4

// warmUp runs c's warm-up round, and runs it again (on new keys) while a
// pod's Redis breaker opened in it or was not closed when it started: a
// new process's first burst on a loaded machine (its runtime growing its
// heap and stacks under a thousand goroutines) can miss the operation
// timeout, and the rounds are to measure the steady state. Each retry
// waits for the breaker's open timeout first, and is said on stderr.
func warmUp(ctx context.Context, c *contender, admin *redis.Client, cfg Config) error {
	for w := range maxWarmUps {
		st, err := runOne(ctx, c, admin, cfg, 0, fmt.Sprintf("warmup%d", w), nil)
		if err != nil {
			return err
		}
		if st.BreakerOpenPods == 0 {
			return nil
		}
		fmt.Fprintf(os.Stderr, "stampede: %s: warm-up %d: the Redis breaker of %d of %d pods was open; warming up again\n",
			c.mode, w+1, st.BreakerOpenPods, st.Pods)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(resilience.DefaultRedisOpenTimeout):
		}
	}
	return nil
}

// startContender starts mode's pods and waits until they are ready.
func startContender(ctx context.Context, cfg Config, admin *redis.Client, addr, mode, ns string) (*contender, error) {
	cfgs := make([]podConfig, cfg.Pods)
	for i := range cfgs {
		cfgs[i] = podConfig{Pod: i, Mode: mode, Addr: addr, Name: ns, Callers: cfg.Callers,
			Load: cfg.Load, Lock: cfg.Lock, OpTimeout: cfg.OpTimeout, GocacheLocal: cfg.GocacheLocal}
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	fleet, err := StartFleet(sctx, cfg.Spawn, cfgs)
	if err != nil {
		return nil, err
	}
	if mode == modePipeline {
		// Wait until every pod's announcement subscription is live, so
		// that the first round measures the steady state.
		if err := waitSubscribers(sctx, admin, ns, cfg.Pods); err != nil {
			_ = fleet.Close()
			return nil, err
		}
	}
	return &contender{mode: mode, ns: ns, fleet: fleet}, nil
}

// lockPattern is the SCAN pattern of the lock keys of c's pods.
func (c *contender) lockPattern() string {
	if c.mode == modePipeline {
		ks, err := rkey.New(rkey.DefaultPrefix, c.ns)
		if err == nil {
			return ks.Lock("*")
		}
	}
	return peerPrefix(c.ns) + "*:lock"
}

func killRedisLater(priv *redistest.Server, after, restart time.Duration) {
	time.AfterFunc(after, func() {
		if err := priv.Kill(); err != nil {
			fmt.Fprintln(os.Stderr, "stampede: kill redis:", err)
			return
		}
		fmt.Fprintf(os.Stderr, "stampede: redis-server SIGKILLed %v into round 1\n", after)
		if restart > 0 {
			time.Sleep(restart)
			if err := priv.Restart(); err != nil {
				fmt.Fprintln(os.Stderr, "stampede: restart redis:", err)
				return
			}
			fmt.Fprintf(os.Stderr, "stampede: redis-server restarted %v after the kill\n", restart)
		}
	})
}

func waitSubscribers(ctx context.Context, c *redis.Client, name string, n int) error {
	ks, err := rkey.New(rkey.DefaultPrefix, name)
	if err != nil {
		return err
	}
	for {
		m, err := c.PubSubNumSub(ctx, ks.Channel()).Result()
		if err == nil && m[ks.Channel()] >= int64(n) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stampede: pods' announcement subscriptions not live: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// lockDefaultsForReport are the lock settings a zero lockSettings means.
func lockDefaultsForReport(l lockSettings) lockSettings {
	if l.Lease == 0 {
		l.Lease = resilience.DefaultLockLease
	}
	return l
}
