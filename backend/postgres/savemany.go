package postgres

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// maxSaveBatch is the most saves one statement runs: like an acquire's,
// a save's row locks are held until its statement ends (see
// maxAcquireBatch).
const maxSaveBatch = 128

// saveCall is one Save waiting for its statement (see batcher).
type saveCall struct {
	ns, key, token   string
	fence, ttlUS     int64
	data             []byte
	release          bool
	channel, payload string
	budget
	done chan saveResult // buffered
}

type saveResult struct {
	n   int // 1 stored, 0 refused, -1 lock lost
	err error
}

func newSaver(b *Backend) *batcher[*saveCall] {
	return &batcher[*saveCall]{limit: cap(b.busy), most: maxSaveBatch, send: b.sendSaves}
}

// save runs c in the next statement of saves. It returns when that
// statement has answered for it, or when the caller's context ends, with
// the context that the error is judged by, as withConn does.
func (b *Backend) save(ctx context.Context, c *saveCall) (context.Context, saveResult) {
	c.budget, c.done = budgetOf(ctx), make(chan saveResult, 1)
	b.saves.add(c)
	select {
	case r := <-c.done:
		return c.caller, r
	case <-c.caller.Done():
		return c.caller, saveResult{err: c.caller.Err()}
	}
}

// sendSaves runs calls' saves in one statement, which takes the rows in
// the order of their keys (see sendAcquires).
func (b *Backend) sendSaves(calls []*saveCall) {
	n := len(calls)
	ns, keys, tokens := make([]string, n), make([]string, n), make([]string, n)
	fences, ttls := make([]int64, n), make([]int64, n)
	data, release := make([][]byte, n), make([]bool, n)
	channels, payloads := make([]string, n), make([]string, n)
	bs := make([]budget, n)
	for i, c := range calls {
		ns[i], keys[i], tokens[i], fences[i], ttls[i] = c.ns, c.key, c.token, c.fence, c.ttlUS
		data[i], release[i], channels[i], payloads[i], bs[i] = c.data, c.release, c.channel, c.payload, c.budget
	}
	res := make([]saveResult, n)
	err := b.onBatchConn(bs, func(ctx context.Context, conn *pgxpool.Conn) error {
		rows, err := conn.Query(ctx, b.q.saveMany, ns, keys, fences, data, ttls, tokens, release, channels, payloads)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var i, r int
			if err := rows.Scan(&i, &r); err != nil {
				return err
			}
			if i >= 1 && i <= n {
				res[i-1] = saveResult{n: r}
			}
		}
		return rows.Err()
	})
	for i, c := range calls {
		if err != nil {
			res[i] = saveResult{err: err}
		}
		c.done <- res[i]
	}
}
