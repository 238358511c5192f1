package postgres

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestMigrate_concurrentAndIdempotent(t *testing.T) {
	f := newFixture(t, Options{})
	ctx := testCtx(t)
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	backends := make([]*Backend, n)
	for i := range backends {
		backends[i] = f.backend()
	}
	for i, b := range backends {
		wg.Go(func() { errs[i] = b.Migrate(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent Migrate: %v", err)
	}
	// Again, on a fresh backend: the fast path, and the tables work.
	b := f.backend()
	if err := b.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	s := f.openOn(b, "ns", 0)
	if _, err := s.Save(ctx, "k", []byte("v"), backend.Save{Until: time.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
}

// A process that read the schema as missing and then waited for the
// advisory lock while another process migrated runs no DDL: its DDL would
// take table locks that the live traffic of processes already done waits
// for (a statement that waits past its lock_timeout fails, and its call
// runs unlocked).
func TestMigrate_afterAnotherProcessMigrated_waitsForNoTable(t *testing.T) {
	f := newFixture(t, Options{})
	ctx := testCtx(t)
	a := f.backend()
	if err := a.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	db := newPool(t)
	exec := func(c interface {
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	}, sql string, args ...any) {
		t.Helper()
		if _, err := c.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// The schema looks missing to the next reader, and another
	// process's migration holds the advisory lock.
	exec(db, "COMMENT ON TABLE "+a.q.lockT+" IS NULL")
	other, err := db.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release()
	exec(other, "SELECT pg_advisory_lock($1)", a.lockID)

	b := f.backend()
	done := make(chan error, 1)
	go func() { done <- b.Migrate(ctx) }()
	waiting := func(locktype string) bool {
		var n int
		err := db.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = $1", locktype).Scan(&n)
		return err == nil && n > 0
	}
	eventually(t, "the migration waiting for the advisory lock", func() bool { return waiting("advisory") })

	// The other migration completes, and live traffic writes a lock row
	// in a transaction left open.
	exec(db, "COMMENT ON TABLE "+a.q.lockT+" IS '"+schemaVersion+"'")
	live, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = live.Rollback(context.Background()) }()
	exec(live, "LOCK TABLE "+a.q.lockT+" IN ROW EXCLUSIVE MODE")
	exec(other, "SELECT pg_advisory_unlock($1)", a.lockID)

	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Migrate: %v", err)
			}
			return
		default:
		}
		if waiting("relation") {
			_ = live.Rollback(ctx)
			t.Fatalf("the migration waits for a table lock held by live traffic (then returned %v)", <-done)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Callers of one Backend wait for its migration no longer than their
// contexts allow.
func TestMigrate_waitingCallerLeavesWithItsContext(t *testing.T) {
	f := newFixture(t, Options{})
	ctx := testCtx(t)
	db := newPool(t)
	hold, err := db.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Release()
	b := f.backend()
	// Another process migrates: b's migration waits for the advisory lock.
	if _, err := hold.Exec(ctx, "SELECT pg_advisory_lock($1)", b.lockID); err != nil {
		t.Fatal(err)
	}
	// The first caller waits for the advisory lock until it is freed
	// below, or for 10 seconds.
	firstCtx, cancelFirst := context.WithTimeout(ctx, 10*time.Second)
	defer cancelFirst()
	first := make(chan error, 1)
	go func() { first <- b.Migrate(firstCtx) }()
	eventually(t, "the first migration waiting for the advisory lock", func() bool {
		var n int
		err := db.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'advisory'").Scan(&n)
		return err == nil && n > 0
	})
	short, cancel := context.WithCancel(ctx)
	cancel()
	second := make(chan error, 1)
	go func() { second <- b.Migrate(short) }()
	select {
	case err := <-second:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Migrate with an ended context, behind a migration in flight = %v, want context.Canceled", err)
		}
	case err := <-first:
		t.Fatalf("the caller whose context ended waited for the migration in flight, which returned %v", err)
	}
	if _, err := hold.Exec(ctx, "SELECT pg_advisory_unlock($1)", b.lockID); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

func TestMigrate_onFirstUse(t *testing.T) {
	f := newFixture(t, Options{})
	s := f.open("ns", 0)
	ctx := testCtx(t)
	if got, err := s.Load(ctx, "k"); got != nil || err != nil {
		t.Fatalf("Load on a database without the tables = %q, %v; want a miss", got, err)
	}
}

func TestUnlogged_valueTableEmptiedByCrash_fencesStillGrow(t *testing.T) {
	s := server(t)
	f := newFixture(t, Options{Unlogged: true})
	sh := f.open("ns", 0)
	ctx := testCtx(t)
	if err := sh.b.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	rows, err := sh.b.pool.Query(ctx, "SELECT relname, relpersistence::text FROM pg_class WHERE relname IN ($1, $2)",
		f.prefix+"lock", f.prefix+"value")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name, kind string
		if err := rows.Scan(&name, &kind); err != nil {
			t.Fatal(err)
		}
		kinds[name] = kind
	}
	if rows.Err() != nil || kinds[f.prefix+"value"] != "u" || kinds[f.prefix+"lock"] != "p" {
		t.Fatalf("persistence = %v, %v; want the value table unlogged, the lock table logged", kinds, rows.Err())
	}
	l, err := sh.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sh.Save(ctx, "k", []byte("v"), backend.Save{Fence: l.Fence(), Token: l.Token(), Release: true,
		Until: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	l.Forget()
	// A checkpoint makes the logged tables' rows durable beyond the crash
	// (fsync is off in tests, not the WAL).
	if _, err := sh.b.pool.Exec(ctx, "CHECKPOINT"); err != nil {
		t.Fatal(err)
	}
	restart(t, s)
	eventually(t, "database back", func() bool { return sh.Ping(ctx) == nil })
	if got, err := sh.Load(ctx, "k"); got != nil || err != nil {
		t.Fatalf("Load after a crash = %q, %v; want the UNLOGGED table emptied", got, err)
	}
	l2, err := sh.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if l2.Fence() <= l.Fence() {
		t.Fatalf("fence after the crash %d <= %d", l2.Fence(), l.Fence())
	}
	_ = l2.Release(ctx)
}

// restart stops the server as a crash would and starts it again.
func restart(t *testing.T, s interface {
	Stop() error
	Start() error
}) {
	t.Helper()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
}

func TestSweep_deletesExpiredRowsInBatches(t *testing.T) {
	f := newFixture(t, Options{Sweep: -1, FenceRetention: time.Millisecond})
	s := f.open("ns", 0)
	ctx := testCtx(t)
	if err := s.b.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// 1,200 expired values (more than two batches), 3 live ones; lock rows
	// of released grants.
	if _, err := s.b.pool.Exec(ctx, "INSERT INTO "+s.b.q.valueT+
		" SELECT 'ns', 'old' || i, 0, '\\x00', clock_timestamp() - interval '1 second' FROM generate_series(1, 1200) i"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if _, err := s.Save(ctx, k, []byte("v"), backend.Save{Until: time.Now().Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := s.TryAcquire(ctx, "held", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	for _, k := range []string{"x", "y"} {
		lx, err := s.TryAcquire(ctx, k, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		_ = lx.Release(ctx)
	}
	time.Sleep(10 * time.Millisecond)
	if err := s.b.sweep(ctx); err != nil {
		t.Fatal(err)
	}
	var values, locks int
	if err := s.b.pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+s.b.q.valueT+"), (SELECT count(*) FROM "+
		s.b.q.lockT+")").Scan(&values, &locks); err != nil {
		t.Fatal(err)
	}
	if values != 3 || locks != 1 {
		t.Fatalf("after a sweep: %d values, %d lock rows; want the 3 live values and the held lock", values, locks)
	}
}

func TestMigrate_againAfterTheTablesWereDropped(t *testing.T) {
	f := newFixture(t, Options{})
	s := f.open("ns", 0)
	ctx := testCtx(t)
	if _, err := s.Save(ctx, "k", []byte("v"), backend.Save{Until: time.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.b.pool.Exec(ctx, "DROP TABLE "+s.b.q.lockT+", "+s.b.q.valueT); err != nil {
		t.Fatal(err)
	}
	// The first operation fails, and the next one finds the tables again.
	_, _ = s.Load(ctx, "k")
	eventually(t, "tables created again", func() bool {
		_, err := s.Save(ctx, "k", []byte("v"), backend.Save{Until: time.Now().Add(time.Minute)})
		return err == nil
	})
}

func TestSweep_runsEverySweep(t *testing.T) {
	f := newFixture(t, Options{Sweep: 50 * time.Millisecond})
	s := f.open("ns", 0)
	ctx := testCtx(t)
	if _, err := s.Save(ctx, "k", []byte("v"), backend.Save{Until: time.Now().Add(50 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the expired value's row deleted", func() bool {
		var n int
		err := s.b.pool.QueryRow(ctx, "SELECT count(*) FROM "+s.b.q.valueT).Scan(&n)
		return err == nil && n == 0
	})
}
