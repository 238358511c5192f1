package postgres

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// TestManyKeyStatements_scanNoTable: the statements of many keys (loads,
// beats, acquires, saves) look each key up in its table's index, whatever the plan
// PostgreSQL cached for them: plans made while the tables were empty, then
// run over 20,000 rows, scan no table whole. (A join of the keys with the
// value table, planned while it was empty, scanned it whole once it held
// 100,000 values: 18 ms a statement of 64 keys instead of 0.3 ms, and a
// GetMany of 100,000 keys took a minute.)
func TestManyKeyStatements_scanNoTable(t *testing.T) {
	f := newFixture(t, Options{})
	b := f.backend()
	ctx := testCtx(t)
	if err := b.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := b.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	// The plans a long-lived connection keeps from its first statements.
	if _, err := c.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	const n = 64
	run := func(prefix string) {
		t.Helper()
		ns, keys, tokens, ttls := make([]string, n), make([]string, n), make([]string, n), make([]int64, n)
		fences, data, release := make([]int64, n), make([][]byte, n), make([]bool, n)
		for i := range n {
			ns[i], keys[i], tokens[i], ttls[i] = "ns", fmt.Sprintf("%s%d", prefix, i*97), "tok", 60_000_000
			fences[i], data[i], release[i] = 1, []byte("v"), true
		}
		// Half of the acquires find a live holder, half a free key.
		fresh := make([]string, n)
		for i := range n {
			fresh[i] = keys[i]
			if i%2 == 1 {
				fresh[i] = fmt.Sprintf("fresh-%s%d", prefix, i)
			}
		}
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{b.q.loadMany, []any{ns, keys}},
			{b.q.extendMany, []any{ns, keys, tokens, ttls}},
			{b.q.acquireMany, []any{ns, fresh, tokens, ttls, ttls}},
			{b.q.saveMany, []any{ns, keys, fences, data, ttls, tokens, release, ns, ns}},
		} {
			rows, err := c.Query(ctx, q.sql, q.args...)
			if err != nil {
				t.Fatal(err)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 6 {
		run(fmt.Sprintf("before%d-", i))
	}
	for _, q := range []string{
		"INSERT INTO " + b.q.valueT + " SELECT 'ns', 'k' || g, 1, '\\x00', now() + interval '1 hour' FROM generate_series(1, 20000) AS g",
		"INSERT INTO " + b.q.lockT + " SELECT 'ns', 'k' || g, 'tok', 1, now() + interval '1 hour', now(), interval '1 second' FROM generate_series(1, 20000) AS g",
	} {
		if _, err := b.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	before := seqScans(ctx, t, c, b)
	run("k")
	if after := seqScans(ctx, t, c, b); after != before {
		t.Fatalf("the statements of %d keys scanned the tables whole %d times; want index lookups only", n, after-before)
	}
}

// seqScans returns how many times the backend's tables were scanned whole.
func seqScans(ctx context.Context, t *testing.T, c *pgxpool.Conn, b *Backend) int64 {
	t.Helper()
	var n int64
	if _, err := c.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
		t.Fatal(err)
	}
	// A statement of its own: the flush happens when the one above ends.
	if _, err := c.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		t.Fatal(err)
	}
	err := c.QueryRow(ctx, "SELECT coalesce(sum(seq_scan), 0)::bigint FROM pg_stat_user_tables WHERE relid IN ($1::regclass, $2::regclass)",
		b.q.lockT, b.q.valueT).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
