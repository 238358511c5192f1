package postgres

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herdguard/herdguard/resilience"
)

// maxLoadBatch is the most loads one statement reads: a larger statement
// would take long enough to miss the operation timeout for all of them
// at once, on a loaded machine.
const maxLoadBatch = 64

// loader coalesces the value loads of one [Backend]: the loads that
// arrive while the statements of loads wait for their connections or are
// in flight are sent together, maxLoadBatch to a statement, as soon as
// one returns; as many statements run at once as the pipeline's
// operations may use connections (see withConn). A burst of cold keys
// thus reads its values in a few statements instead of one per key, each
// of which could, on a loaded machine, miss the operation timeout. A lone
// load is sent at once.
type loader struct {
	b *Backend

	mu      sync.Mutex  // guards queue and running
	queue   []*loadCall // calls not sent yet
	running int         // goroutines that send the queue (see run)
}

// loadCall is one Load waiting for its statement.
type loadCall struct {
	ns, key string
	// caller is the caller's context, which bounds the wait for a
	// connection, and timeout, if positive, bounds the statement from
	// when it has one (see withConn).
	caller  context.Context
	timeout time.Duration
	done    chan loadResult // buffered
}

type loadResult struct {
	data  []byte // nil when not found
	found bool
	err   error
}

// load reads key's live value in the next statement of loads. It returns
// when that statement has answered for it, or when the caller's context
// ends; ctx is the operation's, as withConn takes it.
func (l *loader) load(ctx context.Context, ns, key string) (context.Context, loadResult) {
	caller, timeout, _ := resilience.BackendBudget(ctx)
	c := &loadCall{ns: ns, key: key, caller: caller, timeout: timeout, done: make(chan loadResult, 1)}
	l.mu.Lock()
	l.queue = append(l.queue, c)
	if l.running < cap(l.b.busy) {
		l.running++
		// It ends once the queue is empty: each round ends when its
		// statement does, or when all of its callers have left.
		go l.run()
	}
	l.mu.Unlock()
	select {
	case r := <-c.done:
		return caller, r
	case <-caller.Done():
		return caller, loadResult{err: caller.Err()}
	}
}

// run sends the queue, one statement at a time, until it is empty.
func (l *loader) run() {
	for {
		l.mu.Lock()
		n := min(len(l.queue), maxLoadBatch)
		calls := l.queue[:n:n]
		l.queue = l.queue[n:]
		if n == 0 {
			l.queue = nil
			l.running--
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		l.send(calls)
	}
}

// send reads calls' values in one statement. It waits for a connection
// (as withConn does for a budgeted operation) until every caller has
// left, and bounds the statement by the longest of their timeouts.
func (l *loader) send(calls []*loadCall) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var left atomic.Int64
	left.Store(int64(len(calls)))
	timeout := time.Duration(0)
	for _, c := range calls {
		stop := context.AfterFunc(c.caller, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
		timeout = max(timeout, c.timeout)
	}
	fail := func(err error) {
		for _, c := range calls {
			c.done <- loadResult{err: err}
		}
	}
	select {
	case l.b.busy <- struct{}{}:
		defer func() { <-l.b.busy }()
	case <-ctx.Done():
		fail(ctx.Err())
		return
	}
	conn, err := l.b.pool.Acquire(ctx)
	if err != nil {
		fail(err)
		return
	}
	defer conn.Release()
	if timeout > 0 {
		var c context.CancelFunc
		ctx, c = context.WithTimeout(ctx, timeout)
		defer c()
	}
	ns, keys := make([]string, len(calls)), make([]string, len(calls))
	for i, c := range calls {
		ns[i], keys[i] = c.ns, c.key
	}
	rows, err := conn.Query(ctx, l.b.q.loadMany, ns, keys)
	if err != nil {
		fail(err)
		return
	}
	found := make([][]byte, len(calls))
	ok := make([]bool, len(calls))
	for rows.Next() {
		var i int
		var data []byte
		if err = rows.Scan(&i, &data); err != nil {
			break
		}
		if i >= 1 && i <= len(calls) {
			found[i-1], ok[i-1] = data, true
		}
	}
	rows.Close()
	if err == nil {
		err = rows.Err()
	}
	if err != nil {
		fail(err)
		return
	}
	for i, c := range calls {
		c.done <- loadResult{data: found[i], found: ok[i]}
	}
}
