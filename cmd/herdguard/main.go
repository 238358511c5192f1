package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/resilience"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// defaultTimeout bounds the dial and each Redis command: an operator
// facing an unreachable Redis hears so within it.
const defaultTimeout = 2 * time.Second

func main() {
	// go-redis logs dial failures itself; the command reports them once.
	redis.SetLogger(quiet{})
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// quiet is a go-redis logger that drops what it is given.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// options are the flags every subcommand shares, and those some take.
type options struct {
	addr, prefix, pipeline string
	json, showValue        bool
	timeout, hold          time.Duration
}

// command is one subcommand: its flags beyond the shared ones, whether it
// takes a key, and what it does.
type command struct {
	summary string
	withKey bool
	flags   func(fs *flag.FlagSet, o *options)
	do      func(ctx context.Context, rdb *redis.Client, keys rkey.Space, o options, key string, out io.Writer) error
}

var commands = map[string]command{
	"inspect": {summary: "the value and the lock of one key", withKey: true, do: inspect,
		flags: func(fs *flag.FlagSet, o *options) {
			fs.BoolVar(&o.showValue, "show-value", false, "print the value's bytes (they may be secret)")
		}},
	"locks":       {summary: "the held locks of a pipeline, oldest beat first", do: locks},
	"subscribers": {summary: "how many connections listen to the pipeline's announcements", do: subscribers},
	"invalidate": {summary: "invalidate one key through the library's fenced script", withKey: true, do: invalidate,
		flags: func(fs *flag.FlagSet, o *options) {
			fs.DurationVar(&o.hold, "hold", resilience.DefaultLockLease,
				"how long the tombstone refuses unlocked write-backs (a pipeline's: the longest of its lock lease, loader Timeout and 1s)")
		}},
}

const usageText = `usage: herdguard COMMAND -pipeline NAME [flags] [KEY]

commands:
  inspect      the value and the lock of one key
  locks        the held locks of a pipeline, oldest beat first
  subscribers  how many connections listen to the pipeline's announcements
  invalidate   invalidate one key through the library's fenced script

Run herdguard COMMAND -h for its flags.
`

// run runs the command line args (without the program name) and returns
// the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "help" || args[0] == "--help" {
		fmt.Fprint(stderr, usageText)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "herdguard: unknown command %q\n%s", args[0], usageText)
		return exitUsage
	}
	o, key, err := parse(args[0], cmd, args[1:], stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case err != nil:
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	keys, err := rkey.New(o.prefix, o.pipeline)
	if err != nil {
		fmt.Fprintf(stderr, "herdguard: %v\n", err)
		return exitUsage
	}
	ctx := context.Background()
	rdb, err := connect(ctx, o)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitFailure
	}
	defer rdb.Close()
	if err := cmd.do(ctx, rdb, keys, o, key, stdout); err != nil {
		fmt.Fprintln(stderr, err)
		return exitFailure
	}
	return exitOK
}

// parse reads a subcommand's flags, which may come before or after its
// key.
func parse(name string, cmd command, args []string, stderr io.Writer) (options, string, error) {
	var o options
	fs := flag.NewFlagSet("herdguard "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.addr, "redis", "127.0.0.1:6379", "Redis address, host:port or a redis:// URL")
	fs.StringVar(&o.prefix, "prefix", rkey.DefaultPrefix, "key prefix of the pipeline's keys")
	fs.StringVar(&o.pipeline, "pipeline", "", "the pipeline's name (required)")
	fs.BoolVar(&o.json, "json", false, "print JSON")
	fs.DurationVar(&o.timeout, "timeout", defaultTimeout, "bound of the dial and of each Redis command")
	if cmd.flags != nil {
		cmd.flags(fs, &o)
	}
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return o, "", err
		}
		if fs.NArg() == 0 {
			break
		}
		rest, args = append(rest, fs.Arg(0)), fs.Args()[1:]
	}
	switch {
	case o.pipeline == "":
		return o, "", fmt.Errorf("herdguard %s: -pipeline is required", name)
	case o.timeout <= 0:
		return o, "", fmt.Errorf("herdguard %s: -timeout must be positive", name)
	case cmd.withKey && len(rest) != 1:
		return o, "", fmt.Errorf("herdguard %s: want exactly one KEY, got %d", name, len(rest))
	case cmd.withKey && rest[0] == "":
		return o, "", fmt.Errorf("herdguard %s: KEY is empty", name)
	case !cmd.withKey && len(rest) != 0:
		return o, "", fmt.Errorf("herdguard %s: takes no KEY", name)
	case name == "invalidate" && o.hold <= 0:
		return o, "", fmt.Errorf("herdguard %s: -hold must be positive", name)
	}
	if cmd.withKey {
		return o, rest[0], nil
	}
	return o, "", nil
}

// connect dials Redis and checks that it answers within o.timeout.
func connect(ctx context.Context, o options) (*redis.Client, error) {
	ro := &redis.Options{Addr: o.addr}
	if strings.Contains(o.addr, "://") {
		var err error
		if ro, err = redis.ParseURL(o.addr); err != nil {
			return nil, fmt.Errorf("herdguard: -redis: %w", err)
		}
	}
	ro.DialTimeout, ro.ReadTimeout, ro.WriteTimeout = o.timeout, o.timeout, o.timeout
	ro.MaxRetries, ro.PoolSize = -1, 2
	rdb := redis.NewClient(ro)
	pctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("herdguard: redis at %s did not answer within %v: %w", ro.Addr, o.timeout, err)
	}
	return rdb, nil
}
