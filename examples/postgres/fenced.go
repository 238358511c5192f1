package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herdguard/herdguard/resilience"
)

// errSuperseded means the downstream row already holds a write under a
// higher fence: a load under a newer lock grant wrote it, so this one's
// value is older and was not written.
var errSuperseded = errors.New("postgres example: a load under a newer lock grant wrote the report first")

// errNoGrant means the load runs without a lock grant (no Lock, Redis
// failing, or after MaxWait), so there is no fence to guard the
// downstream write with: it is not made.
var errNoGrant = errors.New("postgres example: no lock grant to fence the downstream write")

// execer is what a reports table needs of a pool.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// reports is a downstream table that loads write their reports to: one
// row per report, with the fence of the lock grant whose load wrote it.
type reports struct {
	db    execer
	table string
}

// createReports creates the reports table named table.
func createReports(ctx context.Context, db execer, table string) (reports, error) {
	_, err := db.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+table+
		" (id bigint PRIMARY KEY, v text NOT NULL, fence bigint NOT NULL)")
	if err != nil {
		return reports{}, fmt.Errorf("postgres example: create the reports table: %w", err)
	}
	return reports{db: db, table: table}, nil
}

// write upserts report id with v under fence and reports whether it
// landed. The guard (WHERE r.fence < $1) lets it land only over a row
// written under a lower fence, or where there is none: a holder paused
// past its lease, whose grant was taken over, cannot overwrite the newer
// holder's row when it wakes. The same guard fits a plain UPDATE:
// UPDATE t SET v = $2, fence = $1 WHERE id = $3 AND fence < $1.
func (r reports) write(ctx context.Context, id int64, v string, fence int64) (bool, error) {
	tag, err := r.db.Exec(ctx, "INSERT INTO "+r.table+" AS r (id, v, fence) VALUES ($3, $2, $1) "+
		"ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v, fence = EXCLUDED.fence WHERE r.fence < $1",
		fence, v, id)
	if err != nil {
		return false, fmt.Errorf("postgres example: write report %d: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// loader returns the loader of report keys ("report:<id>"): it computes
// the report with compute, then writes it to the table, fenced by the
// lock grant the load runs under ([resilience.Fence]). A load without a
// grant fails with errNoGrant; one whose write a newer grant's write
// already beat fails with errSuperseded. Either way nothing is written,
// and the pipeline caches nothing.
func (r reports) loader(compute func(ctx context.Context, id int64) (string, error)) resilience.LoadFunc[string] {
	return func(ctx context.Context, key string) (string, error) {
		fence, ok := resilience.Fence(ctx, key)
		if !ok {
			return "", fmt.Errorf("%w: %s", errNoGrant, key)
		}
		id, err := reportID(key)
		if err != nil {
			return "", err
		}
		v, err := compute(ctx, id)
		if err != nil {
			return "", err
		}
		landed, err := r.write(ctx, id, v, fence)
		if err != nil {
			return "", err
		}
		if !landed {
			return "", fmt.Errorf("%w: %s under fence %d", errSuperseded, key, fence)
		}
		return v, nil
	}
}

// reportID parses the id of a report key.
func reportID(key string) (int64, error) {
	id, err := strconv.ParseInt(strings.TrimPrefix(key, "report:"), 10, 64)
	if err != nil || !strings.HasPrefix(key, "report:") {
		return 0, fmt.Errorf("postgres example: %q is not a report key (report:<id>)", key)
	}
	return id, nil
}

// FencedReport is what [runFenced] observed.
type FencedReport struct {
	// First and Second are the fences of the two loads' grants.
	First, Second int64
	// LateLanded reports whether the late write under First landed.
	LateLanded bool
	// Value and Fence are the row at the end.
	Value string
	Fence int64
}

// runFenced shows a loader that fences its downstream write. A pipeline
// with Lock loads report 7 and writes its row under the grant's fence;
// the key is invalidated and loaded again, under a new grant with a
// higher fence. Then the first grant's write arrives late, as it would
// from a holder paused past its lease while another pod took the lock
// over: the guard refuses it, and the row keeps the newer load's value.
// The lock here is in-process; with [resilience.Builder.Redis] the same
// loader fences the pods of a fleet.
func runFenced(ctx context.Context, url string, w io.Writer) (FencedReport, error) {
	var rep FencedReport
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return rep, fmt.Errorf("postgres example: %w", err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return rep, fmt.Errorf("postgres example: cannot reach the database: %w", err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	rs, err := createReports(ctx, pool, "herdguard_reports_"+hex.EncodeToString(b[:]))
	if err != nil {
		return rep, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = pool.Exec(dctx, "DROP TABLE IF EXISTS "+rs.table)
	}()

	p, err := resilience.New[string]("pg-fenced-reports").Cache(time.Minute).Lock(resilience.LockSettings{}).Build()
	if err != nil {
		return rep, err
	}
	defer p.Close()
	const key = "report:7"
	loads := 0
	load := rs.loader(func(ctx context.Context, id int64) (string, error) {
		loads++ // the two Gets run one after the other
		fence, _ := resilience.Fence(ctx, key)
		if loads == 1 {
			rep.First = fence
		} else {
			rep.Second = fence
		}
		return fmt.Sprintf("report %d, load %d", id, loads), nil
	})
	for i, fence := range []*int64{&rep.First, &rep.Second} {
		if i > 0 {
			if err := p.Invalidate(ctx, key); err != nil {
				return rep, err
			}
		}
		v, err := p.Get(ctx, key, load)
		if err != nil {
			return rep, err
		}
		fmt.Fprintf(w, "load %d: %q written downstream under fence %d\n", i+1, v, *fence)
	}
	rep.LateLanded, err = rs.write(ctx, 7, "late write of load 1", rep.First)
	if err != nil {
		return rep, err
	}
	fmt.Fprintf(w, "a late write under fence %d (load 1's grant) landed: %v\n", rep.First, rep.LateLanded)
	if err := pool.QueryRow(ctx, "SELECT v, fence FROM "+rs.table+" WHERE id = 7").Scan(&rep.Value, &rep.Fence); err != nil {
		return rep, fmt.Errorf("postgres example: read report 7: %w", err)
	}
	fmt.Fprintf(w, "row 7: %q, fence %d\n", rep.Value, rep.Fence)
	return rep, nil
}
