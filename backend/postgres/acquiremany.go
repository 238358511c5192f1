package postgres

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// maxAcquireBatch is the most acquires one statement runs: its row locks
// are held until it ends, and the statements of other processes that ask
// for the same keys wait for them. The statement's checks and writes are
// set operations over its keys (schema 5), so it ends soon all the same.
const maxAcquireBatch = 128

// acquireCall is one TryAcquire waiting for its statement (see batcher).
type acquireCall struct {
	ns, key, token  string
	leaseUS, beatUS int64
	budget
	done chan acquireResult // buffered
}

type acquireResult struct {
	fence int64
	how   int
	err   error
}

func newAcquirer(b *Backend) *batcher[*acquireCall] {
	return &batcher[*acquireCall]{limit: cap(b.busy), most: maxAcquireBatch, send: b.sendAcquires}
}

// acquire runs c in the next statement of acquires. It returns when that
// statement has answered for it, or when the caller's context ends (the
// outcome is then unknown), with the context that the error is judged
// by, as withConn does.
func (b *Backend) acquire(ctx context.Context, c *acquireCall) (context.Context, acquireResult) {
	c.budget, c.done = budgetOf(ctx), make(chan acquireResult, 1)
	b.acquires.add(c)
	select {
	case r := <-c.done:
		return c.caller, r
	case <-c.caller.Done():
		return c.caller, acquireResult{err: c.caller.Err()}
	}
}

// sendAcquires runs calls' acquires in one statement, which takes the
// rows in the order of their keys, so that two statements never wait for
// each other's rows in opposite orders.
func (b *Backend) sendAcquires(calls []*acquireCall) {
	n := len(calls)
	ns, keys, tokens := make([]string, n), make([]string, n), make([]string, n)
	leases, beats := make([]int64, n), make([]int64, n)
	bs := make([]budget, n)
	for i, c := range calls {
		ns[i], keys[i], tokens[i], leases[i], beats[i], bs[i] = c.ns, c.key, c.token, c.leaseUS, c.beatUS, c.budget
	}
	res := make([]acquireResult, n)
	err := b.onBatchConn(bs, func(ctx context.Context, conn *pgxpool.Conn) error {
		rows, err := conn.Query(ctx, b.q.acquireMany, ns, keys, tokens, leases, beats)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var i, how int
			var fence int64
			if err := rows.Scan(&i, &fence, &how); err != nil {
				return err
			}
			if i >= 1 && i <= n {
				res[i-1] = acquireResult{fence: fence, how: how}
			}
		}
		return rows.Err()
	})
	for i, c := range calls {
		if err != nil {
			res[i] = acquireResult{err: err}
		}
		c.done <- res[i]
	}
}
