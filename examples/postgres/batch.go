package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herdguard/herdguard/resilience"
)

// Item is a row of the batch demo's table.
type Item struct {
	ID   int64
	Name string
}

// BatchRound is what one GetMany call of the batch demo did.
type BatchRound struct {
	// Keys is how many keys the call asked.
	Keys int
	// Queries is how many statements reached PostgreSQL during the call.
	Queries int64
	// Queried is how many ids those statements asked for.
	Queried int
	// Sources counts the keys by where their value came from.
	Sources map[resilience.Source]int
	// NotFound is how many keys have no row.
	NotFound int
	// Errors is how many keys failed.
	Errors int
}

// batchRows is how many rows the demo's table holds: ids 1 to batchRows.
const batchRows = 1000

// runBatch shows GetMany in front of one `WHERE id = ANY($1)` query: a
// table of 1,000 items, then three batches. The first asks 100 cold ids:
// one query for all of them. The second asks 200 ids, 100 of them cached,
// 90 new and 10 with no row: one query for the 100 misses. The third asks
// the same 200 again: no query at all (the missing rows are cached as not
// found).
func runBatch(ctx context.Context, url string, w io.Writer) ([]BatchRound, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres example: %w", err)
	}
	// Count the statements that reach the database, and the ids they ask.
	tr := &queryCounter{}
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres example: %w", err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return nil, fmt.Errorf("postgres example: cannot reach the database: %w", err)
	}
	table, err := itemsTable(ctx, pool)
	if err != nil {
		return nil, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = pool.Exec(dctx, "DROP TABLE IF EXISTS "+table)
	}()

	// loadItems is the batch loader: one query for every id asked. An id
	// with no row is left out of the map: not found.
	loadItems := func(ctx context.Context, keys []string) (map[string]Item, error) {
		ids := make([]int64, 0, len(keys))
		for _, k := range keys {
			id, err := strconv.ParseInt(k, 10, 64)
			if err != nil {
				continue // not an id: no row
			}
			ids = append(ids, id)
		}
		rows, err := pool.Query(ctx, "SELECT id, name FROM "+table+" WHERE id = ANY($1)", ids)
		if err != nil {
			return nil, err
		}
		items, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Item])
		if err != nil {
			return nil, err
		}
		out := make(map[string]Item, len(items))
		for _, it := range items {
			out[strconv.FormatInt(it.ID, 10)] = it
		}
		return out, nil
	}

	items, err := resilience.New[Item]("pg-items").
		Cache(time.Minute).
		NegativeTTL(30 * time.Second). // ids with no row: cached as such
		SingleFlight().
		Timeout(2 * time.Second).
		Build()
	if err != nil {
		return nil, err
	}
	defer items.Close()

	ids := func(from, to int) []string {
		var out []string
		for i := from; i <= to; i++ {
			out = append(out, strconv.Itoa(i))
		}
		return out
	}
	second := append(ids(1, 100), ids(101, 190)...)
	second = append(second, ids(batchRows+1, batchRows+10)...) // no rows
	var rounds []BatchRound
	for i, keys := range [][]string{ids(1, 100), second, second} {
		q, n := tr.queries.Load(), tr.ids.Load()
		rs, err := items.GetMany(ctx, keys, loadItems)
		var ke resilience.KeyErrors
		if err != nil && !errors.As(err, &ke) {
			return rounds, err
		}
		r := BatchRound{Keys: len(keys), Queries: tr.queries.Load() - q, Queried: int(tr.ids.Load() - n),
			Sources: map[resilience.Source]int{}, Errors: len(ke)}
		for _, res := range rs {
			r.Sources[res.Source]++
			if res.NotFound {
				r.NotFound++
			}
		}
		rounds = append(rounds, r)
		printBatch(w, i+1, r)
	}
	return rounds, nil
}

// itemsTable creates a table of its own (a fresh name, so runs never
// meet) holding ids 1 to batchRows.
func itemsTable(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	table := "herdguard_items_" + hex.EncodeToString(b[:])
	_, err := pool.Exec(ctx, "CREATE TABLE "+table+" (id bigint PRIMARY KEY, name text NOT NULL);"+
		"INSERT INTO "+table+" SELECT i, 'item ' || i FROM generate_series(1, "+strconv.Itoa(batchRows)+") AS i")
	if err != nil {
		return "", fmt.Errorf("postgres example: create the items table: %w", err)
	}
	return table, nil
}

func printBatch(w io.Writer, n int, r BatchRound) {
	var srcs []string
	for s, k := range r.Sources {
		srcs = append(srcs, fmt.Sprintf("%s=%d", s, k))
	}
	slices.Sort(srcs)
	fmt.Fprintf(w, "batch %d: keys=%d queries=%d ids_queried=%d sources: %s not_found=%d errors=%d\n",
		n, r.Keys, r.Queries, r.Queried, strings.Join(srcs, " "), r.NotFound, r.Errors)
}

// queryCounter is a pgx tracer that counts the SELECT statements sent to
// PostgreSQL, and the ids their first argument asks for.
type queryCounter struct{ queries, ids atomic.Int64 }

func (c *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(d.SQL, "SELECT") {
		c.queries.Add(1)
		if len(d.Args) > 0 {
			if ids, ok := d.Args[0].([]int64); ok {
				c.ids.Add(int64(len(ids)))
			}
		}
	}
	return ctx
}

func (c *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
