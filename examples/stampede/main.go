// Command stampede is the toolkit's stampede harness: P processes ("pods")
// of G goroutines each ask at once for one cold key through the pipeline,
// against a real Redis, with a loader that sleeps -load; each round uses a
// fresh key. It reports, per round, how many loader calls ran across all
// pods (the goal is 1), errors, fail-opens, Redis commands and latency.
// With -keys N a round is a burst of N cold keys, every one asked at once
// in every pod (-callers goroutines per key, 1 by default), and the goal is
// one loader call per key.
//
//	go run ./examples/stampede                         # 8 pods x 64 callers, 5 rounds
//	go run ./examples/stampede -callers 512 -json
//	go run ./examples/stampede -mode poll              # cachekit-style lock, for comparison
//	go run ./examples/stampede -kill-redis-after 100ms # SIGKILL Redis mid-round 1
//	go run ./examples/stampede -pods 4 -keys 1000 -load 50ms -mode pipeline,gocache,redislock
//
// Without -redis it starts a private redis-server on a free loopback port
// (redis-server must be installed) and stops it at the end.
//
// Pods are this binary re-executed with a hidden -child flag; each pod
// builds one pipeline (one Redis client, one announcement subscription)
// and talks to the parent over its stdin and stdout: the parent says when
// a round starts (a start time, so the pods go together), and each pod
// reports every loader call as it begins and, at the end of the round, the
// latency and outcome of each of its callers. Counting travels over the
// pipes, not through Redis, so it stays right when Redis dies.
//
// Figures per round: loader_calls (across pods), callers, errors, fail_open
// (calls that went on without Redis), redis_commands (the INFO
// commandstats delta: every command Redis ran, including those inside Lua
// scripts; -1 if unknown), redis_round_trips (round trips the pods' clients
// made, a pipeline counting as one), locks_left (the mode's lock keys in
// Redis at the round's end), breaker_open (pods whose Redis breaker was
// open in the round), p50_ms, p99_ms, max_ms (per call, from its start).
// With -keys, loads are also counted key by key (keys loaded more than
// once, the most loads of one key, keys whose callers got different
// values), Redis figures are given per key, and locks_left comes with the
// longest PTTL among the locks. An unreported warm-up round per mode first
// loads the scripts and opens the connections; it is run again (up to 4
// times, said on stderr) while a pod's Redis breaker opened in it, so that
// the rounds start from the steady state.
//
// Modes: pipeline (the toolkit: per-pod single-flight, one lock script,
// waiters woken by an announcement), poll (every caller tries SET NX PX
// every 100 ms with no single-flight, and loads unlocked after 5 seconds,
// as cachekit does), gocache (github.com/go-redis/cache's Once: per-pod
// single-flight, no lock across pods; its local TinyLFU cache is on unless
// -gocache-local=false) and redislock (per-pod singleflight, then a
// github.com/bsm/redislock lock with bounded exponential backoff; waiters
// that are not granted it poll the value, then load unlocked) and
// singleflight (golang.org/x/sync/singleflight in each pod and nothing
// else: no Redis, every pod loads every key; the harness's own floor, the
// latency that spawning and waking this many goroutines costs here, with
// no cache to consult and nobody to wait for across pods). Several
// modes, comma-separated, each get their own pods and take turns round by
// round, so that drift in the machine's load hits them alike.
//
// Fault injection: -kill-redis-after D SIGKILLs the private Redis D into
// the first round; -restart-redis-after D2 starts it again (empty, same
// port) D2 later. Later rounds then show the pods failing open (Redis
// down) and recovering (the Redis breaker's half-open probe).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/herdguard/herdguard/resilience"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-child" {
		os.Exit(childMain())
	}
	cfg, asJSON, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := runMain(ctx, cfg, asJSON, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		stop()
		os.Exit(1)
	}
}

// parseFlags reads the command line into a Config.
func parseFlags(args []string, errOut io.Writer) (Config, bool, error) {
	fs := flag.NewFlagSet("stampede", flag.ContinueOnError)
	fs.SetOutput(errOut)
	var c Config
	fs.IntVar(&c.Pods, "pods", 8, "child processes (pods)")
	fs.IntVar(&c.Callers, "callers", 0, "goroutines per pod asking for each key at once (0: 64, or 1 with -keys)")
	fs.IntVar(&c.Keys, "keys", 0, "a burst of this many cold keys per round, all asked at once (0: one key)")
	fs.DurationVar(&c.Load, "load", 200*time.Millisecond, "how long the loader takes")
	fs.IntVar(&c.Rounds, "rounds", 5, "rounds, each on a fresh key")
	fs.StringVar(&c.Redis, "redis", "", "Redis address; empty starts a private redis-server")
	fs.StringVar(&c.Mode, "mode", modePipeline, "pipeline, poll, gocache, redislock or singleflight; several, comma-separated, take turns")
	fs.BoolVar(&c.GocacheLocal, "gocache-local", true, "gocache mode: go-redis/cache's local TinyLFU cache on")
	fs.DurationVar(&c.Lock.Lease, "lease", 0, "lock lease (0: the library default, 30s)")
	fs.DurationVar(&c.OpTimeout, "op-timeout", 0, "Redis operation timeout in pipeline mode (0: the library default, 200ms)")
	fs.DurationVar(&c.KillRedisAfter, "kill-redis-after", 0, "SIGKILL the private Redis this long into round 1 (0: never)")
	fs.DurationVar(&c.RestartRedisAfter, "restart-redis-after", 0, "restart the private Redis this long after -kill-redis-after (0: never)")
	asJSON := fs.Bool("json", false, "print one JSON object per round")
	if err := fs.Parse(args); err != nil {
		return c, false, err
	}
	if fs.NArg() > 0 {
		err := fmt.Errorf("stampede: unexpected arguments %q", fs.Args())
		fmt.Fprintln(errOut, err)
		return c, false, err
	}
	return c, *asJSON, nil
}

// runMain runs the harness and prints its report to w.
func runMain(ctx context.Context, cfg Config, asJSON bool, w io.Writer) error {
	cfg.defaults()
	if _, err := parseModes(cfg.Mode); err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(w)
		return Run(ctx, cfg, func(s RoundStats) { _ = enc.Encode(s) })
	}
	l := lockDefaultsForReport(cfg.Lock)
	op := cfg.OpTimeout
	if op == 0 {
		op = resilience.DefaultRedisTimeout
	}
	fmt.Fprintf(w, "mode=%s pods=%d keys=%d callers/pod/key=%d load=%v rounds=%d lease=%v op_timeout=%v",
		cfg.Mode, cfg.Pods, max(cfg.Keys, 1), cfg.Callers, cfg.Load, cfg.Rounds, l.Lease, op)
	if strings.Contains(cfg.Mode, modeGocache) {
		fmt.Fprintf(w, " gocache_local=%v", cfg.GocacheLocal)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := singleRow
	if cfg.Keys > 0 {
		row = burstRow
	}
	fmt.Fprintln(tw, row(nil))
	var problems []string
	err := Run(ctx, cfg, func(s RoundStats) {
		fmt.Fprintln(tw, row(&s))
		for _, p := range s.PodErrors {
			problems = append(problems, fmt.Sprintf("round %d %s: %s", s.Round, s.Mode, p))
		}
		if s.PodLoads != s.LoaderCalls {
			problems = append(problems, fmt.Sprintf("round %d %s: the pods counted %d loads, their load events %d",
				s.Round, s.Mode, s.PodLoads, s.LoaderCalls))
		}
	})
	_ = tw.Flush()
	if len(problems) > 0 {
		fmt.Fprintln(w, "errors seen:\n  "+strings.Join(problems, "\n  "))
	}
	return err
}

// singleRow is a table row for a round on one key; the header for nil.
func singleRow(s *RoundStats) string {
	if s == nil {
		return "round\tmode\tcallers\tloader_calls\terrors\tfail_open\tredis_commands\tround_trips\tlocks_left\tbreaker_open\tp50_ms\tp99_ms\tmax_ms\t"
	}
	return fmt.Sprintf("%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%.1f\t%.1f\t%.1f\t", s.Round, s.Mode, s.Callers,
		s.LoaderCalls, s.Errors, s.FailOpen, s.RedisCommands, s.RedisCalls, s.LockKeysLeft, breakerCell(s),
		s.P50ms, s.P99ms, s.Maxms)
}

// burstRow is a table row for a round on a burst of keys; the header for
// nil. multi is keys loaded more than once, max the most loads of one key,
// split keys whose callers got different values.
func burstRow(s *RoundStats) string {
	if s == nil {
		return "round\tmode\tkeys\tcallers\tloads\tmulti\tmax\tsplit\terrors\tfail_open\tcmds/key\ttrips/key\tlocks_left\tlock_pttl_ms\tbreaker_open\tp50_ms\tp99_ms\tmax_ms\t"
	}
	return fmt.Sprintf("%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.2f\t%.2f\t%d\t%.0f\t%s\t%.1f\t%.1f\t%.1f\t",
		s.Round, s.Mode, s.Keys, s.Callers, s.LoaderCalls, s.KeysMultiLoad, s.MaxLoadsPerKey, s.KeysSplit,
		s.Errors, s.FailOpen, s.CommandsPerKey, s.RoundTripsPerKey, s.LockKeysLeft, s.LockMaxPTTLms,
		breakerCell(s), s.P50ms, s.P99ms, s.Maxms)
}

// breakerCell is "open/pods", with "(k at start)" when k pods began the
// round with their breaker not closed yet.
func breakerCell(s *RoundStats) string {
	c := fmt.Sprintf("%d/%d", s.BreakerOpenPods, s.Pods)
	if s.BreakerOpenAtStart > 0 {
		c += fmt.Sprintf(" (%d at start)", s.BreakerOpenAtStart)
	}
	return c
}
