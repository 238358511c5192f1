package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/rkey"
)

// burstConfig is a burst small enough for CI on two cores: 200 cold keys
// asked at once in each of 4 pods, one caller per key per pod, a 50 ms
// loader.
func burstConfig(mode string, rounds int) Config {
	return Config{Pods: 4, Keys: 200, Load: 50 * time.Millisecond, Rounds: rounds, Mode: mode,
		Spawn: testSpawner, RoundTimeout: 2 * time.Minute}
}

func runBurst(t *testing.T, cfg Config) []RoundStats {
	t.Helper()
	var rounds []RoundStats
	if err := Run(context.Background(), cfg, func(s RoundStats) { rounds = append(rounds, s) }); err != nil {
		t.Fatal(err)
	}
	return rounds
}

// TestBurst_allModes_consistent: every mode runs a burst of 200 keys x 4
// pods, two rounds each, the modes taking turns; each round's report adds
// up: every caller answered, the loads counted key by key match the pods'
// own count, every key was loaded at least once and by each pod at most
// once, a key split between values was loaded more than once, the lock
// scan ran, and only the pipeline has a breaker to report.
func TestBurst_allModes_consistent(t *testing.T) {
	cfg := burstConfig("pipeline,poll,gocache,redislock", 2)
	cfg.OpTimeout = robustOpTimeout
	rounds := runBurst(t, cfg)
	if len(rounds) != 8 {
		t.Fatalf("got %d rounds, want 8 (2 of each of 4 modes)", len(rounds))
	}
	// Round r starts with mode r-1 and the modes take turns.
	wantOrder := []string{"pipeline", "poll", "gocache", "redislock", "poll", "gocache", "redislock", "pipeline"}
	for i, s := range rounds {
		if s.Mode != wantOrder[i] || s.Round != i/4+1 {
			t.Errorf("report %d: round %d of %s, want round %d of %s", i, s.Round, s.Mode, i/4+1, wantOrder[i])
		}
		checkBurstRound(t, s)
	}
	for _, s := range rounds {
		// Both release their lock before their callers return.
		if (s.Mode == modePoll || s.Mode == modeRedislock) && s.LockKeysLeft != 0 {
			t.Errorf("%s round %d: %d lock keys left", s.Mode, s.Round, s.LockKeysLeft)
		}
		t.Logf("%s round %d: loads=%d multi=%d cmds/key=%.1f trips/key=%.1f locks_left=%d p50=%.1fms p99=%.1fms",
			s.Mode, s.Round, s.LoaderCalls, s.KeysMultiLoad, s.CommandsPerKey, s.RoundTripsPerKey, s.LockKeysLeft, s.P50ms, s.P99ms)
	}
}

// TestBurst_singleflightMode: the floor mode sends Redis nothing, and each
// pod loads every key itself, at least once.
func TestBurst_singleflightMode(t *testing.T) {
	rounds := runBurst(t, burstConfig(modeLocal, 1))
	if len(rounds) != 1 {
		t.Fatalf("got %d rounds, want 1", len(rounds))
	}
	s := rounds[0]
	if s.Answered != s.Callers || s.Errors != 0 || s.RedisCalls != 0 {
		t.Errorf("answered %d of %d, errors %d, round trips %d; want all, none, none", s.Answered, s.Callers, s.Errors, s.RedisCalls)
	}
	if s.KeysNotLoaded != 0 || s.LoaderCalls < s.Keys*s.Pods || s.LoaderCalls != s.PodLoads {
		t.Errorf("loads %d (pods say %d) for %d keys in %d pods, %d keys not loaded; want every pod to load every key",
			s.LoaderCalls, s.PodLoads, s.Keys, s.Pods, s.KeysNotLoaded)
	}
}

// checkBurstRound checks what holds for every round of every mode.
func checkBurstRound(t *testing.T, s RoundStats) {
	t.Helper()
	tag := fmt.Sprintf("%s round %d", s.Mode, s.Round)
	if s.Keys != 200 || s.Callers != 800 || s.Answered != 800 || s.Errors != 0 {
		t.Errorf("%s: keys=%d callers=%d answered=%d errors=%d problems=%v; want 200 keys, 800 callers answered, no errors",
			tag, s.Keys, s.Callers, s.Answered, s.Errors, s.PodErrors)
	}
	sources := 0
	for _, n := range s.Sources {
		sources += n
	}
	if sources != s.Answered {
		t.Errorf("%s: sources %v add up to %d, want %d", tag, s.Sources, sources, s.Answered)
	}
	if s.LoaderCalls != s.PodLoads {
		t.Errorf("%s: %d loads counted key by key, %d by the pods", tag, s.LoaderCalls, s.PodLoads)
	}
	extra := s.LoaderCalls - s.Keys
	if s.KeysNotLoaded != 0 || s.MaxLoadsPerKey < 1 || s.MaxLoadsPerKey > s.Pods ||
		extra < s.KeysMultiLoad || extra > s.KeysMultiLoad*(s.MaxLoadsPerKey-1) {
		t.Errorf("%s: loads=%d over %d keys, not loaded=%d, loaded more than once=%d, max per key=%d: inconsistent",
			tag, s.LoaderCalls, s.Keys, s.KeysNotLoaded, s.KeysMultiLoad, s.MaxLoadsPerKey)
	}
	if s.KeysSplit > s.KeysMultiLoad {
		t.Errorf("%s: %d keys split between values but only %d loaded more than once", tag, s.KeysSplit, s.KeysMultiLoad)
	}
	if s.LockKeysLeft < 0 || (s.LockKeysLeft == 0 && s.LockMaxPTTLms != 0) {
		t.Errorf("%s: lock scan: %d keys, max PTTL %.0f ms", tag, s.LockKeysLeft, s.LockMaxPTTLms)
	}
	if s.RedisCommands <= 0 || s.RedisCalls <= 0 || s.CommandsPerKey != float64(s.RedisCommands)/200 ||
		s.RoundTripsPerKey != float64(s.RedisCalls)/200 {
		t.Errorf("%s: redis_commands=%d (%.2f/key), round trips=%d (%.2f/key)",
			tag, s.RedisCommands, s.CommandsPerKey, s.RedisCalls, s.RoundTripsPerKey)
	}
	if s.Mode != modePipeline && s.BreakerOpenPods != 0 {
		t.Errorf("%s: %d pods report a breaker, which this mode has not", tag, s.BreakerOpenPods)
	}
	if s.Values != nil {
		t.Errorf("%s: values reported for a burst", tag)
	}
}

// TestLockKeysLeft_countsLocksAndPTTL: the round-end scan finds each mode's
// lock keys and only them, with the longest PTTL, or -1 when a lock has no
// TTL.
func TestLockKeysLeft_countsLocksAndPTTL(t *testing.T) {
	srv := redistest.Start(t)
	rc := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pipe := &contender{mode: modePipeline, ns: "ns"}
	peer := &contender{mode: modeRedislock, ns: "ns"}
	set := func(key string, ttl time.Duration) {
		t.Helper()
		if err := rc.Set(ctx, key, "x", ttl).Err(); err != nil {
			t.Fatal(err)
		}
	}
	ks, err := rkey.New(rkey.DefaultPrefix, "ns")
	if err != nil {
		t.Fatal(err)
	}
	other, err := rkey.New(rkey.DefaultPrefix, "other")
	if err != nil {
		t.Fatal(err)
	}
	set(ks.Lock("a"), 20*time.Second)
	set(ks.Lock("b"), 40*time.Second)
	set(ks.Value("a"), time.Minute)           // a value, not a lock
	set(other.Lock("a"), time.Minute)         // another namespace
	set("stampede:ns:c:lock", 10*time.Second) // a peer's
	set("stampede:ns:c", time.Minute)

	n, longest, err := lockKeysLeft(ctx, rc, pipe.lockPattern())
	if err != nil || n != 2 || longest <= 30*time.Second || longest > 40*time.Second {
		t.Errorf("pipeline locks: %d, longest %v, %v; want 2, about 40s", n, longest, err)
	}
	n, longest, err = lockKeysLeft(ctx, rc, peer.lockPattern())
	if err != nil || n != 1 || longest <= 0 || longest > 10*time.Second {
		t.Errorf("peer locks: %d, longest %v, %v; want 1, about 10s", n, longest, err)
	}
	set(ks.Lock("c"), 0) // no TTL
	if n, longest, err = lockKeysLeft(ctx, rc, pipe.lockPattern()); err != nil || n != 3 || longest != -1 {
		t.Errorf("with a lock without TTL: %d, longest %v, %v; want 3, -1", n, longest, err)
	}
	if n, longest, err = lockKeysLeft(ctx, rc, (&contender{mode: modePipeline, ns: "none"}).lockPattern()); err != nil || n != 0 || longest != 0 {
		t.Errorf("empty namespace: %d, longest %v, %v; want 0, 0", n, longest, err)
	}
}

// TestParseFlags_burst: -keys makes one caller per key per pod the
// default, -callers still sets it, and -mode takes a list of known modes.
func TestParseFlags_burst(t *testing.T) {
	tests := []struct {
		args        []string
		wantCallers int
		wantModes   []string
		wantErr     bool
	}{
		{args: nil, wantCallers: 64, wantModes: []string{"pipeline"}},
		{args: []string{"-keys", "1000"}, wantCallers: 1, wantModes: []string{"pipeline"}},
		{args: []string{"-keys", "1000", "-callers", "3"}, wantCallers: 3, wantModes: []string{"pipeline"}},
		{args: []string{"-mode", "pipeline,gocache, redislock"}, wantCallers: 64,
			wantModes: []string{"pipeline", "gocache", "redislock"}},
		{args: []string{"-mode", "pipeline,nope"}, wantErr: true},
		{args: []string{"-mode", "poll,poll"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			cfg, _, err := parseFlags(tt.args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			cfg.defaults()
			modes, err := parseModes(cfg.Mode)
			if (err != nil) != tt.wantErr {
				t.Fatalf("modes %q: err = %v, want error %v", cfg.Mode, err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if cfg.Callers != tt.wantCallers || strings.Join(modes, ",") != strings.Join(tt.wantModes, ",") {
				t.Errorf("callers=%d modes=%v; want %d, %v", cfg.Callers, modes, tt.wantCallers, tt.wantModes)
			}
		})
	}
}
