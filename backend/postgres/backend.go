package postgres

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/herdguard/herdguard/backend"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// schemaVersion marks a schema that Migrate completed; a new version of
// schema.sql gets a new mark, so that processes migrate it once.
const schemaVersion = "herdguard postgres schema 5"

//go:embed schema.sql
var schemaSource string

// Backend is a [backend.Backend] kept in a PostgreSQL database, given
// to Builder.Backend. It is safe for concurrent use, and one Backend may
// serve many pipelines.
type Backend struct {
	pool *pgxpool.Pool
	// busy holds a token per connection that the pipeline's operations
	// use: all of the pool's connections but one, or the one of a pool
	// of one (see withConn).
	busy chan struct{}
	o    Options
	q    queries
	// listen configures the LISTEN connections.
	listen *pgx.ConnConfig
	// ext sends the lock's beats, many to a statement; loads, acquires
	// and saves send the value loads, the lock's acquires and the saves.
	ext      *extender
	loads    *batcher[*loadCall]
	acquires *batcher[*acquireCall]
	saves    *batcher[*saveCall]
	// lockID is the advisory lock key that serializes Migrate.
	lockID int64

	migrating chan struct{} // a token: held by this process's one migration
	migrated  atomic.Bool   // set once Migrate succeeded
}

var _ backend.Backend = (*Backend)(nil)

// New returns a Backend that keeps its tables in the database pool talks
// to. It fails when pool is nil or o is not valid (a ListenDSN that does
// not parse). It does not touch the database: the tables and functions are
// created by [Backend.Migrate], which Open and the first operation run
// when no call to it has succeeded yet.
func New(pool *pgxpool.Pool, o Options) (*Backend, error) {
	if pool == nil {
		return nil, errors.New("postgres: pool is nil")
	}
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	listen := pool.Config().ConnConfig.Copy()
	if o.ListenDSN != "" {
		if listen, err = pgx.ParseConfig(o.ListenDSN); err != nil {
			return nil, fmt.Errorf("postgres: ListenDSN: %w", err)
		}
	}
	sum := sha256.Sum256([]byte("herdguard migrate " + o.Schema + "." + o.Prefix))
	b := &Backend{pool: pool, busy: make(chan struct{}, max(pool.Config().MaxConns-1, 1)), o: o, q: newQueries(o), listen: listen,
		lockID:    int64(binary.BigEndian.Uint64(sum[:8])),
		migrating: make(chan struct{}, 1)}
	b.ext, b.loads, b.acquires, b.saves = &extender{b: b}, newLoader(b), newAcquirer(b), newSaver(b)
	return b, nil
}

// System returns "postgresql", the OpenTelemetry db.system.name of the
// backend, for span attributes.
func (b *Backend) System() string { return "postgresql" }

// Migrate creates the tables and functions if they are missing, and
// replaces the functions of an older version. It is idempotent and safe to
// run from many processes at once: the DDL runs in one transaction under
// an advisory transaction lock. When they are up to date it only reads
// (one query), so a role without the right to create tables may use a
// schema that another role migrated; a process that finds them up to date
// once it holds the advisory lock (another process migrated meanwhile)
// runs no DDL either, so that it takes no table lock from the live
// traffic of processes already done. Call it at start-up to learn early
// that the database refuses it; otherwise the first operation runs it.
// Callers of one Backend wait for its one migration as long as their
// contexts allow.
func (b *Backend) Migrate(ctx context.Context) error {
	if b.migrated.Load() {
		return nil
	}
	// The first operation of a pipeline migrates under its budget, which
	// starts when the migration has a connection (see withConn): the wait
	// for another caller's migration is no failing database either.
	caller, _, _ := backend.Budget(ctx)
	select {
	case b.migrating <- struct{}{}:
	case <-caller.Done():
		return fmt.Errorf("postgres: migrate: %w", caller.Err())
	}
	defer func() { <-b.migrating }()
	if b.migrated.Load() {
		return nil
	}
	if err := b.migrate(ctx); err != nil {
		if cerr := ctxErr(caller); cerr != nil {
			return fmt.Errorf("postgres: migrate: %w", cerr)
		}
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	b.migrated.Store(true)
	return nil
}

func (b *Backend) migrate(ctx context.Context) error {
	_, err := b.withConn(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		if ok, err := b.current(ctx, c); ok || err != nil {
			return err
		}
		return b.migrateOn(ctx, c)
	})
	return err
}

// migrateOn runs the DDL on c, in one transaction under the advisory lock.
func (b *Backend) migrateOn(ctx context.Context, c *pgxpool.Conn) error {
	return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", b.lockID); err != nil {
			return err
		}
		// Read again under the lock: each statement of the transaction
		// sees what committed before it, so a migration that ran while
		// this one waited is seen here.
		if ok, err := b.current(ctx, tx); ok || err != nil {
			return err
		}
		// Simple protocol: the script holds many statements.
		_, err := tx.Exec(ctx, b.q.schema, pgx.QueryExecModeSimpleProtocol)
		return err
	})
}

// current reports whether the schema is up to date.
func (b *Backend) current(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (bool, error) {
	var v *string
	if err := q.QueryRow(ctx, b.q.version).Scan(&v); err != nil {
		return false, err
	}
	return v != nil && *v == schemaVersion, nil
}

// lost makes the next operation run Migrate again when err says that a
// table or function is missing (dropped since, or a database restored
// without them).
func (b *Backend) lost(err error) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "42883") {
		b.migrated.Store(false)
	}
}

// ready runs Migrate unless it has succeeded.
func (b *Backend) ready(ctx context.Context) error {
	if b.migrated.Load() {
		return nil
	}
	return b.Migrate(ctx)
}

// Open implements [backend.Backend]: the view of the pipeline named
// s.Namespace. It starts the view's LISTEN connection and its sweeper,
// runs [Backend.Migrate] unless it has succeeded, and waits for the
// connection's first attempt, two seconds at most for both, so that the
// view hears what is notified once it is returned, and a burst of first
// operations does not wait for the migration; a database that cannot be
// reached does not fail Open (the pipeline fails open), the connection
// keeps being tried in the background, and the first operation migrates.
func (b *Backend) Open(s backend.Scope) (backend.Shared, error) {
	if s.Namespace == "" {
		return nil, errors.New("postgres: namespace is empty")
	}
	if s.Heartbeat < 0 {
		return nil, errors.New("postgres: heartbeat must not be negative")
	}
	return newShared(b, s)
}

// queries are the backend's SQL, with its tables' and functions' names.
type queries struct {
	schema, version                        string
	lockT, valueT                          string // the tables' qualified names
	acquireMany, saveMany, nextFence       string
	loadMany, extendMany, release, inspect string
	sweepValues, sweepLocks, sweepBeats    string
	notify, listenName                     string
}

func newQueries(o Options) queries {
	name := func(s string) string { return pgx.Identifier{o.Schema, o.Prefix + s}.Sanitize() }
	persistence := ""
	if o.Unlogged {
		persistence = "UNLOGGED"
	}
	r := strings.NewReplacer(
		"{lock}", name("lock"), "{value}", name("value"), "{beat}", name("beat"), "{lease}", name("lease"),
		"{lock_expires}", pgx.Identifier{o.Prefix + "lock_expires"}.Sanitize(),
		"{value_until}", pgx.Identifier{o.Prefix + "value_until"}.Sanitize(),
		"{clock_us}", name("clock_us"), "{acquire}", name("acquire"),
		"{acquire_many}", name("acquire_many"), "{save}", name("save"), "{save_many}", name("save_many"), "{next_fence}", name("next_fence"),
		"{extend_many}", name("extend_many"),
		"{persistence}", persistence,
		"{lock_wait}", fmt.Sprintf("'%dms'", lockWait.Milliseconds()),
		"{version}", "'"+schemaVersion+"'",
	)
	lockT, valueT, beatT, lease := name("lock"), name("value"), name("beat"), name("lease")
	regclass := "'" + strings.ReplaceAll(lockT, "'", "''") + "'"
	return queries{
		schema:      r.Replace(schemaSource),
		lockT:       lockT,
		valueT:      valueT,
		version:     "SELECT obj_description(to_regclass(" + regclass + "), 'pg_class')",
		acquireMany: "SELECT o_i, o_fence, o_how FROM " + name("acquire_many") + "($1, $2, $3, $4, $5)",
		saveMany:    "SELECT o_i, o_n FROM " + name("save_many") + "($1, $2, $3, $4, $5, $6, $7, $8, $9)",
		nextFence:   "SELECT " + name("next_fence") + "($1, $2, $3, $4, $5)",
		// One index lookup per key, whatever the plan cached for the
		// statement: a join planned while the table was empty scans it
		// whole once it holds 100,000 values (18 ms a statement of 64
		// keys instead of 0.3 ms).
		loadMany: "SELECT r.i::int, r.data FROM (SELECT u.i, (SELECT v.data FROM " + valueT + " AS v " +
			"WHERE v.namespace = u.ns AND v.key = u.key AND v.until > clock_timestamp()) AS data " +
			"FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(ns, key, i) OFFSET 0) AS r WHERE r.data IS NOT NULL",
		extendMany: "SELECT o_i FROM " + name("extend_many") + "($1, $2, $3, $4)",
		// The waiters are woken whether or not the token still held the
		// lock: they should look.
		release: "WITH r AS (UPDATE " + lockT + " AS l SET token = NULL, expires_at = clock_timestamp() " +
			"WHERE l.namespace = $1 AND l.key = $2 AND l.token = $3 AND " +
			"(SELECT le.o_expires FROM " + lease + "(l.namespace, l.key, l.token, l.expires_at, l.beat_at) AS le) > clock_timestamp() RETURNING 1) " +
			"SELECT (SELECT count(*) FROM r) FROM pg_notify($4, $5)",
		inspect: "SELECT (extract(epoch FROM le.o_expires - clock_timestamp()) * 1000000)::bigint FROM " + lockT + " AS l, " +
			"LATERAL " + lease + "(l.namespace, l.key, l.token, l.expires_at, l.beat_at) AS le " +
			"WHERE l.namespace = $1 AND l.key = $2 AND l.token IS NOT NULL AND le.o_expires > clock_timestamp()",
		sweepValues: "DELETE FROM " + valueT + " WHERE ctid = ANY(ARRAY(SELECT v.ctid FROM " + valueT + " AS v " +
			"WHERE v.until < clock_timestamp() LIMIT $1 FOR UPDATE SKIP LOCKED))",
		sweepLocks: "DELETE FROM " + lockT + " WHERE ctid = ANY(ARRAY(SELECT l.ctid FROM " + lockT + " AS l " +
			"WHERE l.expires_at < clock_timestamp() - $2 * interval '1 microsecond' AND NOT EXISTS (SELECT 1 FROM " + beatT + " AS b " +
			"WHERE b.namespace = l.namespace AND b.key = l.key AND b.token = l.token AND " +
			"b.expires_at >= clock_timestamp() - $2 * interval '1 microsecond') LIMIT $1 FOR UPDATE SKIP LOCKED))",
		// A beat row counts for its token's lease only: once the lease
		// has ended, it counts for nothing.
		sweepBeats: "DELETE FROM " + beatT + " WHERE ctid = ANY(ARRAY(SELECT b.ctid FROM " + beatT + " AS b " +
			"WHERE b.expires_at < clock_timestamp() LIMIT $1 FOR UPDATE SKIP LOCKED))",
		notify:     "SELECT pg_notify($1, $2)",
		listenName: o.Schema + "." + o.Prefix,
	}
}

// channelOf returns the notification channel of a namespace: a hash, so
// that it fits PostgreSQL's 63-byte identifiers whatever the namespace.
func channelOf(space, namespace string) string {
	sum := sha256.Sum256([]byte(space + "\x00" + namespace))
	return "herdguard_" + hex.EncodeToString(sum[:16])
}
