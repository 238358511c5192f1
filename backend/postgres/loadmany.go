package postgres

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// loadCall is one Load waiting for its statement (see batcher).
type loadCall struct {
	ns, key string
	budget
	done chan loadResult // buffered
}

type loadResult struct {
	data  []byte // nil when not found
	found bool
	err   error
}

func newLoader(b *Backend) *batcher[*loadCall] {
	return &batcher[*loadCall]{limit: cap(b.busy), most: maxBatch, send: b.sendLoads}
}

// load reads key's live value in the next statement of loads. It returns
// when that statement has answered for it, or when the caller's context
// ends; ctx is the operation's, as withConn takes it. It returns the
// context that the error is judged by, as withConn does.
func (b *Backend) load(ctx context.Context, ns, key string) (context.Context, loadResult) {
	c := &loadCall{ns: ns, key: key, budget: budgetOf(ctx), done: make(chan loadResult, 1)}
	b.loads.add(c)
	select {
	case r := <-c.done:
		return c.caller, r
	case <-c.caller.Done():
		return c.caller, loadResult{err: c.caller.Err()}
	}
}

// loadAll reads keys' live values in the next statements of loads, as
// load does for one: the i-th answer is keys[i]'s.
func (b *Backend) loadAll(ctx context.Context, ns string, keys []string) (context.Context, []loadResult) {
	bu := budgetOf(ctx)
	calls := make([]*loadCall, len(keys))
	for i, k := range keys {
		calls[i] = &loadCall{ns: ns, key: k, budget: bu, done: make(chan loadResult, 1)}
	}
	b.loads.addAll(calls)
	out := make([]loadResult, len(keys))
	for i, c := range calls {
		select {
		case out[i] = <-c.done:
		case <-bu.caller.Done():
			out[i] = loadResult{err: bu.caller.Err()}
		}
	}
	return bu.caller, out
}

// sendLoads reads calls' values in one statement.
func (b *Backend) sendLoads(calls []*loadCall) {
	ns, keys := make([]string, len(calls)), make([]string, len(calls))
	bs := make([]budget, len(calls))
	for i, c := range calls {
		ns[i], keys[i], bs[i] = c.ns, c.key, c.budget
	}
	found := make([][]byte, len(calls))
	ok := make([]bool, len(calls))
	err := b.onBatchConn(bs, func(ctx context.Context, conn *pgxpool.Conn) error {
		rows, err := conn.Query(ctx, b.q.loadMany, ns, keys)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var i int
			var data []byte
			if err := rows.Scan(&i, &data); err != nil {
				return err
			}
			if i >= 1 && i <= len(calls) {
				found[i-1], ok[i-1] = data, true
			}
		}
		return rows.Err()
	})
	for i, c := range calls {
		if err != nil {
			c.done <- loadResult{err: err}
		} else {
			c.done <- loadResult{data: found[i], found: ok[i]}
		}
	}
}
