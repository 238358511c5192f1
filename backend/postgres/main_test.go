package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/internal/pgtest"
)

// srv is the package's PostgreSQL server; nil when there are no binaries.
var srv *pgtest.Server

// TestMain starts the package's server, runs the tests, or, when the
// parent started this binary as a pod (podEnv set), the pod.
func TestMain(m *testing.M) {
	if cfg, ok := os.LookupEnv(podEnv); ok {
		os.Exit(podMain(cfg))
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	s, err := pgtest.Start()
	switch {
	case errors.Is(err, pgtest.ErrNoBinaries) && pgtest.Required():
		fmt.Fprintf(os.Stderr, "postgres tests: %v, and %s=1 requires them\n", err, pgtest.RequireEnv)
		return 1
	case errors.Is(err, pgtest.ErrNoBinaries):
		fmt.Fprintln(os.Stderr, "postgres tests skip:", err)
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
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

// server returns the package's server, skipping t without one.
func server(t testing.TB) *pgtest.Server {
	t.Helper()
	if srv == nil {
		t.Skip(pgtest.ErrNoBinaries)
	}
	return srv
}

// prefixes makes each test's tables its own.
var prefixes atomic.Int64

// newPool returns a pool to the package's server, closed with t.
func newPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	s := server(t)
	cfg, err := pgxpool.ParseConfig(s.DSN())
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// fixture is a test's backend: its own tables (a prefix of its own), and
// views opened on them as processes would, each with a backend and a
// pool of its own.
type fixture struct {
	t      testing.TB
	prefix string
	o      Options
}

func newFixture(t testing.TB, o Options) *fixture {
	o.Prefix = fmt.Sprintf("t%d_", prefixes.Add(1))
	return &fixture{t: t, prefix: o.Prefix, o: o}
}

// backend returns a new Backend on a new pool, as another process's.
func (f *fixture) backend() *Backend {
	f.t.Helper()
	b, err := New(newPool(f.t), f.o)
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

// open returns a view of namespace ns on a new backend, closed with t.
func (f *fixture) open(ns string, heartbeat time.Duration) *shared {
	f.t.Helper()
	return f.openOn(f.backend(), ns, heartbeat)
}

func (f *fixture) openOn(b *Backend, ns string, heartbeat time.Duration) *shared {
	f.t.Helper()
	s, err := b.Open(backend.Scope{Namespace: ns, Heartbeat: heartbeat})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = s.Close() })
	return s.(*shared)
}

// ctx returns a context that ends with t, bounded by a minute.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// waitListening waits until every view listens.
func waitListening(t testing.TB, views ...*shared) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, v := range views {
		for !v.l.listening() {
			if time.Now().After(deadline) {
				t.Fatal("LISTEN connection not up after 30s")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}
