package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// countingTracer counts the statements a pool sends that contain sub.
// tracedView opens a view of namespace "ns" on a backend of its own pool,
// whose statements containing sub the returned tracer counts.
func tracedView(t *testing.T, sub string) (*shared, *countingTracer) {
	t.Helper()
	f := newFixture(t, Options{})
	cfg, err := pgxpool.ParseConfig(server(t).DSN())
	if err != nil {
		t.Fatal(err)
	}
	tr := &countingTracer{sub: sub}
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b, err := New(pool, f.o)
	if err != nil {
		t.Fatal(err)
	}
	return f.openOn(b, "ns", 0), tr
}

type countingTracer struct {
	sub string
	n   atomic.Int64
}

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, c.sub) {
		c.n.Add(1)
	}
	return ctx
}

func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestExtend_concurrentBeats_shareStatements: the beats of many holders
// in one process, due at once, are sent in a few statements, not one per
// holder, and each learns whether its own lease is still held.
func TestExtend_concurrentBeats_shareStatements(t *testing.T) {
	v, tr := tracedView(t, "SELECT o_i FROM")
	var err error
	ctx := testCtx(t)
	const n = 400
	leases := make([]*backend.Lease, n)
	for i := range leases {
		if leases[i], err = v.TryAcquire(ctx, fmt.Sprintf("k%d", i), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	// One holder lost its lock: its beat, in the same statements, says so.
	if err := v.Release(ctx, "k7", leases[7].Token()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, l := range leases {
		wg.Go(func() { errs[i] = v.Extend(ctx, l.Key(), l.Token(), time.Minute) })
	}
	wg.Wait()
	for i, err := range errs {
		want := error(nil)
		if i == 7 {
			want = backend.ErrNotHeld
		}
		if !errors.Is(err, want) {
			t.Fatalf("extend of k%d: %v, want %v", i, err, want)
		}
	}
	// One statement at a time: the first beat alone, then those that
	// arrived meanwhile, and so on; far fewer than one per holder on a
	// loaded machine all the same.
	if got := tr.n.Load(); got > n/4 {
		t.Fatalf("%d statements for %d concurrent beats, want at most %d", got, n, n/4)
	}
	t.Logf("%d statements for %d concurrent beats", tr.n.Load(), n)
	for _, l := range leases {
		_ = l.Release(ctx)
	}
}

// TestMigrate_fromVersion1_addsArrayFunctions: a database migrated by the
// schema's version 1, which had no array functions, is migrated on, and
// the acquires, beats and saves work.
func TestMigrate_fromVersion1_addsArrayFunctions(t *testing.T) {
	f := newFixture(t, Options{})
	ctx := testCtx(t)
	old := f.backend()
	if err := old.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// What version 1 left: none of the array functions, and its mark.
	for _, fn := range []string{"extend_many", "acquire_many", "save_many"} {
		if _, err := old.pool.Exec(ctx, "DROP FUNCTION "+pgx.Identifier{DefaultSchema, f.prefix + fn}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := old.pool.Exec(ctx, "COMMENT ON TABLE "+old.q.lockT+" IS 'herdguard postgres schema 1'"); err != nil {
		t.Fatal(err)
	}
	v := f.open("ns", 0) // a new process: Open migrates
	l, err := v.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Extend(ctx, "k", l.Token(), time.Minute); err != nil {
		t.Fatalf("extend on a database migrated from version 1: %v", err)
	}
	if _, err := v.Save(ctx, "k", []byte("v"), backend.Save{Fence: l.Fence(), Token: l.Token(), Release: true,
		Until: time.Now().Add(time.Minute)}); err != nil {
		t.Fatalf("save on a database migrated from version 1: %v", err)
	}
}
