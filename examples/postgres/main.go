// Command postgres guards a slow PostgreSQL aggregate with a pipeline:
// cache, single-flight, breaker, timeout, stale copies and a default.
//
// It runs three rounds against the database at DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). First a
// stampede: many goroutines ask for the cold value at once, and the query
// runs once. Then an outage: once the cached value has expired, the
// database goes away (the loader is pointed at a closed port, so
// connections are refused), and callers get the stale copy. Last, after
// the stale grace has passed too, callers get the default.
//
// Run it from the examples module:
//
//	go run ./postgres -callers 200 -ttl 500ms -grace 1s
//
// With -batch it shows GetMany instead: batches of ids read from a table
// through one `WHERE id = ANY($1)` query for each batch's misses.
//
//	go run ./postgres -batch
//
// With -fenced it shows a loader that also writes a downstream row and
// fences that write with its lock grant (resilience.Fence): a late write
// from an older grant, as a holder paused past its lease would make after
// another pod took the lock over, is refused, and the row keeps the newer
// load's value.
//
//	go run ./postgres -fenced
//
// With OTEL_EXPORTER_OTLP_ENDPOINT set (e.g. http://127.0.0.1:4318), it
// exports its traces and metrics over OTLP/HTTP.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/examples/internal/otelsetup"
	"github.com/herdguard/herdguard/resilience"
)

// defaultDatabaseURL is used when DATABASE_URL is not set.
const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// query is the slow aggregate: a 200 ms pause, then a count.
const query = `WITH pause AS (SELECT pg_sleep(0.2)) SELECT count(*) FROM pause, generate_series(1, 100000)`

// Stats is what the query computes.
type Stats struct {
	Rows int64
	// Known is false for the default served when the database is gone
	// and no stale copy is left.
	Known bool
}

// Config configures [run].
type Config struct {
	// DatabaseURL is the PostgreSQL connection string.
	DatabaseURL string
	// Callers is how many goroutines ask at once in each round.
	Callers int
	// TTL is how long a loaded value stays fresh.
	TTL time.Duration
	// Grace is how long an expired value is kept as a stale copy.
	Grace time.Duration
	// Timeout bounds one query.
	Timeout time.Duration
}

// Round is what the callers of one round got.
type Round struct {
	// Queries is how many times the query ran during the round.
	Queries int64
	// Sources counts the callers by where their value came from.
	Sources map[resilience.Source]int
	// Values counts the callers by the value they got.
	Values map[Stats]int
	// Errors is how many callers got an error.
	Errors int
	// Causes are the distinct fallback causes seen in the round (by
	// message), in the order first seen: the loader's error, and once the
	// breaker opens, its refusal.
	Causes []error
}

// Report is what [run] observed, round by round.
type Report struct {
	Stampede, Outage, AfterGrace Round
}

func main() {
	cfg := Config{DatabaseURL: os.Getenv("DATABASE_URL")}
	if cfg.DatabaseURL == "" {
		cfg.DatabaseURL = defaultDatabaseURL
	}
	flag.IntVar(&cfg.Callers, "callers", 200, "goroutines asking at once in each round")
	flag.DurationVar(&cfg.TTL, "ttl", 500*time.Millisecond, "how long a loaded value stays fresh")
	flag.DurationVar(&cfg.Grace, "grace", time.Second, "how long an expired value is kept as a stale copy")
	flag.DurationVar(&cfg.Timeout, "timeout", 2*time.Second, "bound of one query")
	batch := flag.Bool("batch", false, "show GetMany: batches of ids, one query for each batch's misses")
	fenced := flag.Bool("fenced", false, "show a loader whose downstream write is fenced by its lock grant")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	// Traces and metrics go to an OTLP endpoint only when
	// OTEL_EXPORTER_OTLP_ENDPOINT is set.
	shutdown, err := otelsetup.Install(ctx, "postgres-example")
	if err != nil {
		log.Fatal(err)
	}
	switch {
	case *batch:
		_, err = runBatch(ctx, cfg.DatabaseURL, os.Stdout)
	case *fenced:
		_, err = runFenced(ctx, cfg.DatabaseURL, os.Stdout)
	default:
		_, err = run(ctx, cfg, os.Stdout)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if serr := shutdown(sctx); serr != nil {
		log.Print(serr)
	}
	if err != nil {
		log.Fatal(err) //nolint:gocritic // cancel has nothing left to release
	}
}

// run plays the three rounds and reports what the callers got.
func run(ctx context.Context, cfg Config, w io.Writer) (Report, error) {
	var rep Report
	if cfg.Callers <= 0 || cfg.TTL <= 0 || cfg.Grace <= 0 || cfg.Timeout <= 0 {
		return rep, errors.New("postgres example: Callers, TTL, Grace and Timeout must be positive")
	}
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return rep, fmt.Errorf("postgres example: %w", err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return rep, fmt.Errorf("postgres example: cannot reach the database: %w", err)
	}

	// db is the pool the loader queries; the outage swaps it.
	var db atomic.Pointer[pgxpool.Pool]
	db.Store(pool)
	var queries atomic.Int64
	load := func(ctx context.Context, _ string) (Stats, error) {
		queries.Add(1)
		var n int64
		if err := db.Load().QueryRow(ctx, query).Scan(&n); err != nil {
			return Stats{}, err
		}
		return Stats{Rows: n, Known: true}, nil
	}

	stats, err := resilience.New[Stats]("pg-row-count").
		Cache(cfg.TTL).
		SingleFlight().
		Breaker(breaker.Settings{Failures: 5, OpenTimeout: 30 * time.Second}).
		Timeout(cfg.Timeout).
		Stale(cfg.Grace).
		DefaultValue(Stats{}).
		Build()
	if err != nil {
		return rep, err
	}
	defer stats.Close()

	rep.Stampede = round(ctx, stats, cfg.Callers, load, &queries)
	loaded := time.Now() // the value was written before the round ended
	printRound(w, "stampede", rep.Stampede)

	down, err := unreachable(ctx, pool)
	if err != nil {
		return rep, err
	}
	defer down.Close()
	// Let the value expire (TTL jitter only shortens it), then take the
	// database away.
	if err := sleepUntil(ctx, loaded.Add(cfg.TTL)); err != nil {
		return rep, err
	}
	db.Store(down)
	rep.Outage = round(ctx, stats, cfg.Callers, load, &queries)
	printRound(w, "database down, value expired", rep.Outage)

	// Let the stale copy go too.
	if err := sleepUntil(ctx, loaded.Add(cfg.TTL+cfg.Grace+50*time.Millisecond)); err != nil {
		return rep, err
	}
	rep.AfterGrace = round(ctx, stats, cfg.Callers, load, &queries)
	printRound(w, "database down, grace passed", rep.AfterGrace)
	return rep, nil
}

// round lets callers goroutines ask for the value at once and tallies what
// they got.
func round(ctx context.Context, p *resilience.Pipeline[Stats], callers int, load resilience.LoadFunc[Stats], queries *atomic.Int64) Round {
	before := queries.Load()
	r := Round{Sources: map[resilience.Source]int{}, Values: map[Stats]int{}}
	var mu sync.Mutex // guards r
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			<-start
			res, err := p.GetResult(ctx, "row-count", load)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				r.Errors++
				return
			}
			r.Sources[res.Source]++
			r.Values[res.Value]++
			if res.Cause != nil && !slices.ContainsFunc(r.Causes, func(c error) bool { return c.Error() == res.Cause.Error() }) {
				r.Causes = append(r.Causes, res.Cause)
			}
		})
	}
	close(start) // all at once: a stampede
	wg.Wait()
	r.Queries = queries.Load() - before
	return r
}

func printRound(w io.Writer, name string, r Round) {
	var srcs []string
	for s, n := range r.Sources {
		srcs = append(srcs, fmt.Sprintf("%s=%d", s, n))
	}
	slices.Sort(srcs)
	fmt.Fprintf(w, "%s: queries=%d sources: %s errors=%d\n", name, r.Queries, strings.Join(srcs, " "), r.Errors)
	for v, n := range r.Values {
		fmt.Fprintf(w, "  %d callers got rows=%d known=%v\n", n, v.Rows, v.Known)
	}
	for _, c := range r.Causes {
		fmt.Fprintf(w, "  because: %v\n", c)
	}
}

// unreachable returns a pool like pool but aimed at a local port nobody
// listens on, so that every connection is refused: the database is gone.
func unreachable(ctx context.Context, pool *pgxpool.Pool) (*pgxpool.Pool, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return nil, err
	}
	cfg := pool.Config().Copy()
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", uint16(port)
	cfg.ConnConfig.Fallbacks = nil
	cfg.ConnConfig.ConnectTimeout = time.Second
	cfg.MinConns = 0
	return pgxpool.NewWithConfig(ctx, cfg) // connects lazily: no error yet
}

// sleepUntil waits until t or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) error {
	tm := time.NewTimer(time.Until(t))
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}
