package postgres

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/jackc/pgx/v5/pgxpool"
)

// maxBatch is the most calls one statement of loads serves:
// a larger statement would take long enough to miss the operation
// timeout for all of them at once, on a loaded machine.
const maxBatch = 64

// batcher coalesces one kind of operation of one [Backend]: the calls
// that arrive while its statements wait for their connections or are in
// flight are sent together, maxBatch to a statement, as soon as one
// returns; as many statements run at once as the pipeline's operations
// may use connections (see withConn). A burst of cold keys thus runs in a
// few statements instead of one per key, each of which could, on a
// loaded machine, miss the operation timeout. A lone call is sent at
// once: nothing waits for a window to fill.
type batcher[C any] struct {
	limit int       // the most statements at once
	most  int       // the most calls to a statement
	send  func([]C) // answers every call it is given

	mu      sync.Mutex // guards queue and running
	queue   []C        // calls not sent yet
	running int        // goroutines that send the queue (see run)
}

// add queues c for the next statement.
func (q *batcher[C]) add(c C) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.queue = append(q.queue, c)
	if q.running < q.limit {
		q.running++
		// It ends once the queue is empty: each round ends when its
		// statement does, or when all of its callers have left.
		go q.run()
	}
}

// addAll queues cs for the next statements.
func (q *batcher[C]) addAll(cs []C) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.queue = append(q.queue, cs...)
	for q.running < q.limit && q.running*q.most < len(q.queue) {
		q.running++
		go q.run()
	}
}

// run sends the queue, one statement at a time, until it is empty.
func (q *batcher[C]) run() {
	for {
		q.mu.Lock()
		n := min(len(q.queue), q.most)
		calls := q.queue[:n:n]
		q.queue = q.queue[n:]
		if n == 0 {
			q.queue = nil
			q.running--
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		q.send(calls)
	}
}

// budget is a call's share of its batch's wait: the caller's context,
// which bounds the wait for a connection, and the operation timeout, if
// positive, which bounds the statement from when it has one (see
// withConn).
type budget struct {
	caller  context.Context
	timeout time.Duration
}

func budgetOf(ctx context.Context) budget {
	caller, timeout, _ := backend.Budget(ctx)
	return budget{caller: caller, timeout: timeout}
}

// onBatchConn runs f on a connection for a batch of calls with budgets
// bs, as withConn does for one budgeted operation: it waits for the
// connection until every caller has left, and f runs under the longest
// of their timeouts from then.
func (b *Backend) onBatchConn(bs []budget, f func(context.Context, *pgxpool.Conn) error) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var left atomic.Int64
	left.Store(int64(len(bs)))
	timeout := time.Duration(0)
	for _, bu := range bs {
		stop := context.AfterFunc(bu.caller, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
		timeout = max(timeout, bu.timeout)
	}
	select {
	case b.busy <- struct{}{}:
		defer func() { <-b.busy }()
	case <-ctx.Done():
		return ctx.Err()
	}
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if timeout > 0 {
		var c context.CancelFunc
		ctx, c = context.WithTimeout(ctx, timeout)
		defer c()
	}
	return f(ctx, conn)
}
