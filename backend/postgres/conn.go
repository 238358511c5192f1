package postgres

import (
	"context"

	"github.com/herdguard/herdguard/backend"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// withConn runs f on one of the pool's connections. The pipeline's
// operations carry their timeout ([backend.Budget]): the
// connection is then awaited under the caller's context, and f runs under
// the timeout, counted from when it has the connection, so that it
// measures the database, never a burst's own wait for the pool's few
// connections (4 on a two-core machine, by pgxpool's default). Such
// operations hold all but one of the pool's connections at most (see
// Backend.busy), so that the lock's beats and releases, which carry no
// budget, never wait behind a burst: a beat that missed its time would
// hand a live holder's lock to another process. Without a budget (a
// beat, a release, a sweep, Migrate called by the user), ctx bounds
// both. It returns the context that the caller's error is judged by: the
// caller's, whose end is the caller's cancellation, while the statement's
// end within the timeout is the database failing.
func (b *Backend) withConn(ctx context.Context, f func(context.Context, *pgxpool.Conn) error) (context.Context, error) {
	caller, timeout, ok := backend.Budget(ctx)
	if ok {
		select {
		case b.busy <- struct{}{}:
			defer func() { <-b.busy }()
		case <-caller.Done():
			return caller, caller.Err()
		}
	}
	c, err := b.pool.Acquire(caller)
	if err != nil {
		return caller, err
	}
	defer c.Release()
	if !ok {
		return caller, f(caller, c)
	}
	sctx, cancel := context.WithTimeout(caller, timeout)
	defer cancel()
	return caller, f(sctx, c)
}

// queryRow runs one statement that returns one row, as withConn does,
// and scans the row into dest.
func (b *Backend) queryRow(ctx context.Context, sql string, args []any, dest ...any) (context.Context, error) {
	return b.withConn(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		return c.QueryRow(ctx, sql, args...).Scan(dest...)
	})
}

// exec runs one statement that returns no rows, as withConn does, and
// returns its command tag.
func (b *Backend) exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, context.Context, error) {
	var tag pgconn.CommandTag
	cctx, err := b.withConn(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		var err error
		tag, err = c.Exec(ctx, sql, args...)
		return err
	})
	return tag, cctx, err
}
