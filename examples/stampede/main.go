// Command stampede is the toolkit's stampede harness: P processes ("pods")
// of G goroutines each ask at once for one cold key through the pipeline,
// against a real Redis, with a loader that sleeps -load; each round uses a
// fresh key. It reports, per round, how many loader calls ran across all
// pods (the goal is 1), errors, fail-opens, Redis commands and latency.
//
//	go run ./examples/stampede                         # 8 pods x 64 callers, 5 rounds
//	go run ./examples/stampede -callers 512 -json
//	go run ./examples/stampede -mode poll              # cachekit-style lock, for comparison
//	go run ./examples/stampede -kill-redis-after 100ms # SIGKILL Redis mid-round 1
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
// scripts; -1 if unknown), redis_round_trips (commands the pods' clients
// sent), p50_ms, p99_ms, max_ms (per call, from its start). An unreported
// warm-up round first loads the scripts and opens the connections.
//
// Modes: pipeline (the toolkit: per-pod single-flight, one lock script,
// waiters woken by an announcement) and poll (every caller tries SET NX PX
// every 100 ms with no single-flight, and loads unlocked after 5 seconds,
// as cachekit does).
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
	fs.IntVar(&c.Callers, "callers", 64, "goroutines per pod asking for the key at once")
	fs.DurationVar(&c.Load, "load", 200*time.Millisecond, "how long the loader takes")
	fs.IntVar(&c.Rounds, "rounds", 5, "rounds, each on a fresh key")
	fs.StringVar(&c.Redis, "redis", "", "Redis address; empty starts a private redis-server")
	fs.StringVar(&c.Mode, "mode", modePipeline, "pipeline, or poll (cachekit-style SET NX retried every 100ms)")
	fs.DurationVar(&c.Lock.Lease, "lease", 0, "lock lease (0: the library default, 30s)")
	fs.DurationVar(&c.Lock.Wait, "wait", 0, "lock wait budget (0: the library default, 5s)")
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
	var tw *tabwriter.Writer
	if asJSON {
		enc := json.NewEncoder(w)
		return Run(ctx, cfg, func(s RoundStats) { _ = enc.Encode(s) })
	}
	l := lockDefaultsForReport(cfg.Lock)
	fmt.Fprintf(w, "mode=%s pods=%d callers/pod=%d load=%v rounds=%d lease=%v wait=%v\n",
		cfg.Mode, cfg.Pods, cfg.Callers, cfg.Load, cfg.Rounds, l.Lease, l.Wait)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tcallers\tloader_calls\terrors\tfail_open\tredis_commands\tround_trips\tp50_ms\tp99_ms\tmax_ms\t")
	var problems []string
	err := Run(ctx, cfg, func(s RoundStats) {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t%.1f\t\n", s.Round, s.Callers, s.LoaderCalls,
			s.Errors, s.FailOpen, s.RedisCommands, s.RedisCalls, s.P50ms, s.P99ms, s.Maxms)
		for _, p := range s.PodErrors {
			problems = append(problems, fmt.Sprintf("round %d: %s", s.Round, p))
		}
	})
	_ = tw.Flush()
	if len(problems) > 0 {
		fmt.Fprintln(w, "errors seen:\n  "+strings.Join(problems, "\n  "))
	}
	return err
}
