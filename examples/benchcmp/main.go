package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// rotateEnv is the bench package's knob for the order of contenders
// within one benchmark (see its contender helpers).
const rotateEnv = "HERDGUARD_BENCH_ROTATE"

// functions are the benchmark functions of the comparison, in the order
// of the report: the default of -bench, and the order of its paths.
var functions = []string{
	"L1Hit", "L1HitParallel", "L1Memory", "L2Hit", "L2HitParallel",
	"ColdMissLock", "ColdMissLockParallel", "DoBreaker", "Breaker", "BreakerParallel",
}

type config struct {
	pkg       string
	bench     string
	once      string
	ours      *regexp.Regexp
	rounds    int
	benchtime string
}

func main() {
	var c config
	var ours string
	flag.StringVar(&c.pkg, "pkg", "./bench", "the benchmark package")
	flag.StringVar(&c.bench, "bench", "^Benchmark("+strings.Join(functions, "|")+")$", "the benchmark functions to run")
	flag.StringVar(&c.once, "once", "Memory", "benchmark functions that run in the first round only (a heap size does not drift with load as time does)")
	flag.StringVar(&ours, "ours", `^(pipeline|breaker\.)`, "the contenders that measure this project; ratios are theirs over each other contender's")
	flag.IntVar(&c.rounds, "rounds", 5, "rounds; each runs every benchmark function once, in a rotated order")
	flag.StringVar(&c.benchtime, "benchtime", "1s", "-test.benchtime of each contender in each round")
	flag.Parse()
	var err error
	if c.ours, err = regexp.Compile(ours); err != nil {
		fatal(err)
	}
	if c.rounds < 1 {
		fatal(errors.New("-rounds must be at least 1"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, c, os.Stdout, os.Stderr); err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "benchcmp:", err)
	os.Exit(1)
}

// run builds the benchmark binary once, runs the benchmark functions
// round after round, and writes the report to out; progress goes to log.
func run(ctx context.Context, c config, out, log io.Writer) error {
	dir, err := os.MkdirTemp("", "benchcmp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "bench.test")
	build := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, c.pkg)
	if b, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go test -c %s: %w\n%s", c.pkg, err, b)
	}
	names, err := list(ctx, bin, c.bench)
	if err != nil {
		return err
	}
	once, err := regexp.Compile(c.once)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "herdguard beside its peers: %s, %d rounds, -benchtime %s, %s %s/%s, %d CPUs, GOMAXPROCS %d\n",
		time.Now().UTC().Format(time.RFC3339), c.rounds, c.benchtime, runtime.Version(), runtime.GOOS, runtime.GOARCH,
		runtime.NumCPU(), runtime.GOMAXPROCS(0))
	fmt.Fprintf(out, "load average at start: %s\n", loadAverage())
	res := newResults()
	for r := range c.rounds {
		for i := range names {
			name := names[(i+r)%len(names)]
			if r > 0 && c.once != "" && once.MatchString(name) {
				continue
			}
			fmt.Fprintf(log, "round %d/%d: %s\n", r+1, c.rounds, name)
			ss, err := runOne(ctx, bin, name, c.benchtime, r)
			if err != nil {
				return err
			}
			res.add(ss)
		}
	}
	fmt.Fprintf(out, "load average at end:   %s\n", loadAverage())
	fmt.Fprintf(out, "medians over the rounds; ratios are medians of ratios taken within one round\n")
	res.sort(functions)
	res.write(out, c.ours)
	return nil
}

// list returns the benchmark functions of bin that match pattern.
func list(ctx context.Context, bin, pattern string) ([]string, error) {
	b, err := exec.CommandContext(ctx, bin, "-test.list", pattern).Output()
	if err != nil {
		return nil, fmt.Errorf("listing benchmarks: %w", err)
	}
	var names []string
	for _, l := range strings.Fields(string(b)) {
		if strings.HasPrefix(l, "Benchmark") {
			names = append(names, l)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no benchmark matches %q", pattern)
	}
	return names, nil
}

// runOne runs one benchmark function, every contender of it, in a process
// of its own, with the contenders' order rotated by round.
func runOne(ctx context.Context, bin, name, benchtime string, round int) ([]sample, error) {
	cmd := exec.CommandContext(ctx, bin, "-test.run", "^$", "-test.bench", "^"+regexp.QuoteMeta(name)+"$",
		"-test.benchmem", "-test.benchtime", benchtime, "-test.count", "1", "-test.timeout", "30m")
	cmd.Env = append(os.Environ(), rotateEnv+"="+strconv.Itoa(round))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %w\n%s%s", name, err, stdout.Bytes(), stderr.Bytes())
	}
	ss, err := parse(&stdout, round)
	if err == nil && len(ss) == 0 {
		err = fmt.Errorf("%s reported no result:\n%s", name, stdout.Bytes())
	}
	return ss, err
}

// loadAverage returns the 1, 5 and 15 minute load averages, where the
// system tells them.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
