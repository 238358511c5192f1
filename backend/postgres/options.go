package postgres

import (
	"errors"
	"regexp"
	"time"
)

// Defaults of [Options].
const (
	// DefaultSchema holds the tables when Options.Schema is empty.
	DefaultSchema = "public"
	// DefaultPrefix starts the tables' and functions' names when
	// Options.Prefix is empty.
	DefaultPrefix = "herdguard_"
	// DefaultPoll is Options.Poll's default.
	DefaultPoll = 250 * time.Millisecond
	// DefaultSweep is Options.Sweep's default.
	DefaultSweep = time.Minute
	// DefaultFenceRetention is Options.FenceRetention's default.
	DefaultFenceRetention = 24 * time.Hour
)

// Options configures a [Backend]. The zero value works.
type Options struct {
	// Schema is the schema that holds the tables and functions; it must
	// exist. A lower-case SQL identifier.
	// default: "public" ([DefaultSchema])
	Schema string
	// Prefix starts the names of the tables and functions, so that
	// several independent backends may share a schema. Lower-case letters,
	// digits and underscores.
	// default: "herdguard_" ([DefaultPrefix])
	Prefix string
	// Unlogged creates the value table UNLOGGED: writes skip the
	// write-ahead log (faster, and no replication of values), and
	// PostgreSQL empties the table after a crash or an immediate
	// shutdown: a cold cache, never a wrong one. The lock table is always
	// logged. It applies when Migrate creates the table; an existing table
	// keeps its kind.
	// default: false
	Unlogged bool
	// ListenDSN, if not empty, is the connection string of the one
	// connection per pipeline that LISTENs for notifications. Set it to
	// the database server itself when the pool goes through a pooler in
	// transaction mode (PgBouncer), where LISTEN does not work.
	// default: "" (the pool's own connection settings)
	ListenDSN string
	// Poll is how often the subscribers of keys (the lock's waiters) are
	// woken while the LISTEN connection is down, so that they look again
	// without waiting for notifications that cannot come; it is also the
	// first wait before the connection is re-established.
	// default: 250 milliseconds ([DefaultPoll])
	Poll time.Duration
	// Sweep is how often each pipeline deletes, in bounded batches, the
	// values past their Until, the lock rows idle for longer than
	// FenceRetention, and the beats of leases that have ended. Processes
	// sweep concurrently without blocking each other (SKIP LOCKED). A
	// negative Sweep turns sweeping off (for a database that deletes them
	// some other way).
	// default: 1 minute ([DefaultSweep])
	Sweep time.Duration
	// FenceRetention is how long a key's lock row, which counts its
	// fences, outlives its last grant or fence. Its loss is harmless as
	// long as the database's clock does not step back (see the package
	// documentation), so it only bounds the table's size.
	// default: 24 hours ([DefaultFenceRetention])
	FenceRetention time.Duration
}

// ident is what Schema and Prefix may hold: they become parts of SQL
// identifiers, so they are kept to characters that need no quoting.
var ident = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// withDefaults validates o and fills its zero fields.
func (o Options) withDefaults() (Options, error) {
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if !ident.MatchString(o.Schema) || !ident.MatchString(o.Prefix) {
		return o, errors.New("postgres: Schema and Prefix must be lower-case letters, digits and underscores")
	}
	if len(o.Prefix) > 40 || len(o.Schema) > 63 {
		return o, errors.New("postgres: Prefix must be at most 40 bytes and Schema 63")
	}
	if o.Poll < 0 || o.FenceRetention < 0 {
		return o, errors.New("postgres: Poll and FenceRetention must not be negative")
	}
	if o.Poll == 0 {
		o.Poll = DefaultPoll
	}
	if o.Sweep == 0 {
		o.Sweep = DefaultSweep
	}
	if o.FenceRetention == 0 {
		o.FenceRetention = DefaultFenceRetention
	}
	return o, nil
}
