package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/internal/pgtest"
	"github.com/herdguard/herdguard/resilience"
)

// srv is the package's private PostgreSQL server, started by TestMain;
// nil when the server binaries are missing.
var srv *pgtest.Server

// TestMain starts the package's PostgreSQL server, runs the tests, or,
// when the parent started this binary as a pod (podEnv set), the pod.
func TestMain(m *testing.M) {
	if cfg, ok := os.LookupEnv(podEnv); ok {
		os.Exit(podMain(cfg))
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	s, err := pgtest.Start()
	switch {
	case errors.Is(err, pgtest.ErrNoBinaries):
		// Each test that needs the server skips, or fails when required.
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		return 1
	default:
		srv = s
		defer func() {
			if err := s.Close(); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}()
	}
	return m.Run()
}

// databaseURL returns the connection string of the package's server. It
// skips t when the PostgreSQL binaries are missing, and fails it instead
// when pgtest.RequireEnv is set.
func databaseURL(t *testing.T) string {
	t.Helper()
	if srv == nil {
		if pgtest.Required() {
			t.Fatalf("%v, and %s=1 requires them", pgtest.ErrNoBinaries, pgtest.RequireEnv)
		}
		t.Skip(pgtest.ErrNoBinaries)
	}
	return srv.DSN()
}

func TestRun_stampedeThenStaleThenDefault(t *testing.T) {
	defer goleak.VerifyNone(t)
	url := databaseURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const callers = 200
	// Each round must end within a window the TTL and the grace set: the
	// stampede's late callers must find the value still fresh (the TTL,
	// less its 10% jitter) and the outage round must end before the stale
	// copy does (the grace, less the jitter). Seconds wide, they leave
	// room for a loaded machine; only a hang would run past them.
	var out bytes.Buffer
	rep, err := run(ctx, Config{DatabaseURL: url, Callers: callers, TTL: 2 * time.Second,
		Grace: 4 * time.Second, Timeout: 5 * time.Second}, &out)
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{Rows: 100000, Known: true}

	s := rep.Stampede
	if s.Queries != 1 {
		t.Errorf("stampede: %d queries for %d callers, want 1", s.Queries, callers)
	}
	// A caller the scheduler starts only after the query finished reads
	// the cached value instead of joining the query.
	if s.Sources[resilience.SourceLoader] != 1 ||
		s.Sources[resilience.SourceCoalesced]+s.Sources[resilience.SourceL1] != callers-1 {
		t.Errorf("stampede sources = %v, want 1 loader and %d coalesced or cached", s.Sources, callers-1)
	}
	if s.Values[want] != callers || s.Errors != 0 {
		t.Errorf("stampede values = %v, errors = %d; want %d callers with %+v", s.Values, s.Errors, callers, want)
	}

	o := rep.Outage
	if o.Sources[resilience.SourceStale] != callers || o.Values[want] != callers || o.Errors != 0 {
		t.Errorf("outage: sources %v, values %v, errors %d; want %d stale copies of %+v",
			o.Sources, o.Values, o.Errors, callers, want)
	}
	if o.Queries < 1 {
		t.Errorf("outage: %d queries, want the expired value to be reloaded", o.Queries)
	}
	// The first failed query is refused by the database; later callers in
	// the round may meet the loader's breaker once enough have failed.
	checkCauses(t, "outage", o.Causes, true)

	g := rep.AfterGrace
	if g.Sources[resilience.SourceDefault] != callers || g.Values[Stats{}] != callers || g.Errors != 0 {
		t.Errorf("after grace: sources %v, values %v, errors %d; want %d defaults", g.Sources, g.Values, g.Errors, callers)
	}
	checkCauses(t, "after grace", g.Causes, false)
}

func TestRun_unreachableDatabaseIsAnError(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Port 1 on loopback: nothing listens there, so the ping is refused.
	_, err := run(ctx, Config{DatabaseURL: "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2",
		Callers: 1, TTL: time.Second, Grace: time.Second, Timeout: time.Second}, &bytes.Buffer{})
	if err == nil {
		t.Fatal("run succeeded without a database")
	}
}

func TestRun_badConfig(t *testing.T) {
	defer goleak.VerifyNone(t)
	if _, err := run(context.Background(), Config{DatabaseURL: defaultDatabaseURL}, &bytes.Buffer{}); err == nil {
		t.Fatal("run accepted a zero Config")
	}
}

// checkCauses checks that every fallback cause is the database refusing
// connections or the loader's breaker refusing the call, and, when
// refused is set, that the database's refusal is among them.
func checkCauses(t *testing.T, round string, causes []error, refused bool) {
	t.Helper()
	seen := false
	for _, c := range causes {
		switch {
		case errors.Is(c, syscall.ECONNREFUSED):
			seen = true
		case errors.Is(c, breaker.ErrOpen):
		default:
			t.Errorf("%s cause %v, want connection refused or the breaker open", round, c)
		}
	}
	if len(causes) == 0 || (refused && !seen) {
		t.Errorf("%s causes %v, want connection refused among them", round, causes)
	}
}
