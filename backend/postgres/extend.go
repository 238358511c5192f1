package postgres

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/jackc/pgx/v5/pgxpool"
)

// extendTimeout bounds one statement of extensions: a holder's watchdog
// beats every second by default and gives each beat that long.
const extendTimeout = backend.DefaultHeartbeat

// maxExtendBatch is the most beats one statement sends: each statement
// has extendTimeout, which one of the thousands of leases of a large
// GetMany's chunks, each beating on its own, might miss on a loaded
// machine.
const maxExtendBatch = 1024

// extender coalesces the extensions (the lock's beats) of one [Backend]:
// the calls that arrive while a statement of extensions is in flight are
// sent together, maxExtendBatch to a statement, as soon as it returns. A
// burst of thousands of holders thus beats in a few statements a second on the
// connection that withConn leaves to the beats, instead of one statement
// per holder, which would miss beats (and hand live holders' locks over)
// once they outnumber what one connection can run in a second. A lone
// beat is sent at once: nothing waits for a window to fill.
type extender struct {
	b *Backend

	mu      sync.Mutex    // guards queue and running
	queue   []*extendCall // calls not sent yet
	running bool          // a goroutine sends the queue (see run)
}

// extendCall is one Extend waiting for its statement.
type extendCall struct {
	ns, key, token string
	ttlUS          int64
	done           chan error // buffered: gets nil, backend.ErrNotHeld or the statement's error
}

// extend resets key's lease to ttl from now if token holds it, in the
// next statement of extensions. It returns when that statement has
// answered for it, or when ctx ends (the statement then still runs).
func (e *extender) extend(ctx context.Context, ns, key, token string, ttl time.Duration) error {
	c := &extendCall{ns: ns, key: key, token: token, ttlUS: ttl.Microseconds(), done: make(chan error, 1)}
	e.mu.Lock()
	e.queue = append(e.queue, c)
	if !e.running {
		e.running = true
		// It ends once the queue is empty: each of its statements is
		// bounded by extendTimeout.
		go e.run()
	}
	e.mu.Unlock()
	select {
	case err := <-c.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run sends the queue, one statement at a time, until it is empty.
func (e *extender) run() {
	for {
		e.mu.Lock()
		n := min(len(e.queue), maxExtendBatch)
		calls := e.queue[:n:n]
		e.queue = e.queue[n:]
		if n == 0 {
			e.queue = nil
			e.running = false
			e.mu.Unlock()
			return
		}
		e.mu.Unlock()
		e.send(calls)
	}
}

// send extends calls' leases in one statement, each distinct lease once,
// in the order of the rows' keys, so that two processes' statements
// never wait for each other's rows in opposite orders.
func (e *extender) send(calls []*extendCall) {
	slices.SortFunc(calls, func(a, b *extendCall) int {
		return cmp.Or(cmp.Compare(a.ns, b.ns), cmp.Compare(a.key, b.key), cmp.Compare(a.token, b.token))
	})
	var ns, keys, tokens []string
	var ttls []int64
	first := make([]int, 0, len(calls)) // the index in calls of each row sent
	for i, c := range calls {
		if i > 0 && c.ns == calls[i-1].ns && c.key == calls[i-1].key && c.token == calls[i-1].token {
			// The same lease twice: one row, the longer lease.
			ttls[len(ttls)-1] = max(ttls[len(ttls)-1], c.ttlUS)
			continue
		}
		first = append(first, i)
		ns, keys, tokens, ttls = append(ns, c.ns), append(keys, c.key), append(tokens, c.token), append(ttls, c.ttlUS)
	}
	held := make([]bool, len(first))
	// The statement runs for the calls that are still waiting and for
	// those that left (their beat is due all the same), on a context of
	// its own.
	ctx, cancel := context.WithTimeout(context.Background(), extendTimeout)
	defer cancel()
	_, err := e.b.withConn(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		rows, err := c.Query(ctx, e.b.q.extendMany, ns, keys, tokens, ttls)
		if err != nil {
			return err
		}
		defer rows.Close()
		var i int
		for rows.Next() {
			if err := rows.Scan(&i); err != nil {
				return err
			}
			if i >= 1 && i <= len(held) {
				held[i-1] = true
			}
		}
		return rows.Err()
	})
	row := -1
	for i, c := range calls {
		if row+1 < len(first) && first[row+1] == i {
			row++
		}
		switch {
		case err != nil:
			c.done <- err
		case held[row]:
			c.done <- nil
		default:
			c.done <- backend.ErrNotHeld
		}
	}
}
