package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/resilience"
)

// databaseURL returns the PostgreSQL to test against. It fails the test
// when that database cannot be reached and CI is set, and skips it
// otherwise.
func databaseURL(t *testing.T) string {
	t.Helper()
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		url = defaultDatabaseURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err == nil {
		err = conn.Ping(ctx)
		_ = conn.Close(ctx)
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("PostgreSQL at %s is required in CI: %v", url, err)
		}
		t.Skipf("no PostgreSQL at %s (set DATABASE_URL): %v", url, err)
	}
	return url
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
	checkCause(t, "outage", o.Cause, o.Queries)

	g := rep.AfterGrace
	if g.Sources[resilience.SourceDefault] != callers || g.Values[Stats{}] != callers || g.Errors != 0 {
		t.Errorf("after grace: sources %v, values %v, errors %d; want %d defaults", g.Sources, g.Values, g.Errors, callers)
	}
	checkCause(t, "after grace", g.Cause, o.Queries+g.Queries)
}

// checkCause checks the cause a round's fallbacks reported: the refused
// connection, or, once failedQueries reached the 5 failures that open the
// breaker (run's settings), possibly the breaker's refusal. Callers that
// come after a failed query start their own, so how many queries an
// outage round makes depends on the scheduler.
func checkCause(t *testing.T, round string, cause error, failedQueries int64) {
	t.Helper()
	if errors.Is(cause, syscall.ECONNREFUSED) {
		return
	}
	if failedQueries >= 5 && errors.Is(cause, breaker.ErrOpen) {
		return
	}
	t.Errorf("%s cause = %v after %d failed queries, want connection refused (or, after 5, breaker open)",
		round, cause, failedQueries)
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
