// Package redisbatch sends the Redis commands that callers issue at the
// same moment as pipelined round trips (auto-pipelining): a burst of a
// thousand cold keys then costs Redis a few deep pipelines instead of a
// thousand round trips queued behind a pool of twenty connections.
//
// A [Batcher] implements the narrow clients of package cache and package
// lock (Scripter, HGet, Del, PTTL, and ProcessBatch for package
// internal/rscript), so both run their commands through it unchanged;
// their scripts go by SHA, loaded once on NOSCRIPT. [WithBudget] gives a
// command the time it may take once its round trip starts.
package redisbatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Batcher sends the commands of its callers in batches.
//
// The round trips run on at most maxSenders goroutines, never on a
// caller's, so that a caller can stop waiting for Redis whatever go-redis
// still does inside Process (a dial, a read that only the client's
// ReadTimeout ends, a retry). A command may take its budget (the
// operation timeout, more for a release) from when its batch is sent,
// and a batch waiting its turn behind the batcher's others at a busy
// Redis is not cut short while Redis answers them (see overdue); a batch
// carries at most [MaxBatch] commands, so a request's own size never spends
// the budget. A command still queued waits for a sender (the queue of a
// burst is not a slow Redis), and fails at once while every sender waits
// on a batch that Redis has left unanswered for lateFactor operation
// timeouts. A caller whose context ends stops waiting too. A caller that
// stopped waiting gets a fresh command holding the error, never one the
// batch may still write to.
//
// A Batcher is safe for concurrent use.
type Batcher struct {
	client  redis.UniversalClient
	timeout time.Duration

	mu      sync.Mutex // guards the fields below
	queue   []*call
	senders int // goroutines sending batches; at most maxSenders
	overrun int // batches in flight unanswered for lateFactor operation timeouts
	// replied is when a round trip last brought a reply from Redis.
	replied time.Time
}

const (
	// maxSenders bounds the batches in flight at once, each on a
	// connection of its own, and the goroutines that send them.
	maxSenders = 4
	// MaxBatch bounds the commands of one batch: a healthy Redis runs
	// that many lock scripts in a few milliseconds, far within the
	// default operation timeout, so a GetMany of 100,000 keys goes out
	// as batches that each fit their budget.
	MaxBatch = 128
)

// errNoReply is the error of a command that Redis did not answer within
// its budget: an infrastructure failure to the pipeline, which wraps
// context.DeadlineExceeded. It speaks as package resilience, whose
// callers see it.
var errNoReply = fmt.Errorf("resilience: redis did not answer within the operation timeout: %w", context.DeadlineExceeded)

type call struct {
	cmd    redis.Cmder
	budget time.Duration // how long the command may take once sent, from its ctx
	done   chan struct{} // closed once the call is over
	// settled is closed once cmd can no longer reach Redis: its round
	// trip ended, or it was failed before it was sent.
	settled chan struct{}
	// err, set before done closes, says why cmd does not hold the
	// result (cmd then belongs to the batch); nil when it does.
	err error
}

func newCall(cmd redis.Cmder, budget time.Duration) *call {
	return &call{cmd: cmd, budget: budget, done: make(chan struct{}), settled: make(chan struct{})}
}

// fail ends c with errNoReply.
func (c *call) fail() {
	c.err = errNoReply
	close(c.done)
}

// left is the error of a call whose caller stopped waiting with err.
func (c *call) left(err error) error { return &pendingError{err: err, settled: c.settled} }

// pendingError is the error of a command whose caller stopped waiting
// (its context ended, or Redis did not answer within the budget) while
// the command may still reach Redis. Settled closes once it no longer
// can: code that must act after the command's outcome (the delete that
// follows an acquire whose outcome is unknown, in package lock) waits for
// it, so that the delete does not reach Redis before the acquire.
type pendingError struct {
	err     error
	settled <-chan struct{}
}

func (e *pendingError) Error() string            { return e.err.Error() }
func (e *pendingError) Unwrap() error            { return e.err }
func (e *pendingError) Settled() <-chan struct{} { return e.settled }

// budgetKey is the context key of how long a command may take once its
// round trip starts (see [WithBudget]).
type budgetKey struct{}

// WithBudget returns ctx carrying d: a command sent under it may take *d
// once its round trip starts, in place of what is left of ctx's deadline.
// d is a pointer, so that the value does not allocate. Without it, a
// command may take what is left of its context's deadline (a release), or
// the batcher's timeout.
func WithBudget(ctx context.Context, d *time.Duration) context.Context {
	return context.WithValue(ctx, budgetKey{}, d)
}

// New returns a Batcher that sends its batches through client, with
// timeout as the operation timeout: the budget of a command whose context
// has neither a budget nor a deadline, and the measure of a Redis that
// does not answer.
func New(client redis.UniversalClient, timeout time.Duration) *Batcher {
	return &Batcher{client: client, timeout: timeout}
}

// process sends cmd with the next batch and waits for its result. A
// non-nil error means cmd does not hold it (Redis did not answer within
// the budget, or ctx ended first) and belongs to the batch: the caller
// reports the error on a fresh command.
func (b *Batcher) process(ctx context.Context, cmd redis.Cmder) error {
	c := newCall(cmd, b.budget(ctx))
	b.enqueue([]*call{c})
	select {
	case <-c.done:
		if c.err != nil {
			return c.left(c.err)
		}
		return nil
	case <-ctx.Done():
		return c.left(ctx.Err())
	}
}

// budget is how long a command sent under ctx may take once its round
// trip starts: see budgetKey.
func (b *Batcher) budget(ctx context.Context) time.Duration {
	if d, ok := ctx.Value(budgetKey{}).(*time.Duration); ok {
		return *d
	}
	if dl, ok := ctx.Deadline(); ok {
		return time.Until(dl)
	}
	return b.timeout
}

// enqueue queues calls and starts the senders they need, up to
// maxSenders. While every sender waits on a batch that Redis left
// unanswered for lateFactor operation timeouts, the calls fail at once,
// but for those with a longer budget than the operation timeout (see
// failPrompt).
func (b *Batcher) enqueue(calls []*call) {
	b.mu.Lock()
	if b.overrun == maxSenders {
		calls = failPrompt(calls, b.timeout)
	}
	b.queue = append(b.queue, calls...)
	start := min(maxSenders-b.senders, (len(b.queue)+MaxBatch-1)/MaxBatch)
	b.senders += start
	b.mu.Unlock()
	for range start {
		// The goroutine ends when it finds the queue empty.
		go b.send()
	}
}

// failPrompt fails the calls whose budget is the operation timeout or
// less, and returns the others: a release (which has a budget of its own,
// the pipeline's release timeout) waits for a sender, however long Redis
// was silent, since a lock left behind holds every pod until its lease
// ends.
func failPrompt(calls []*call, timeout time.Duration) []*call {
	var kept []*call
	for _, c := range calls {
		if c.budget <= timeout {
			c.fail()
			close(c.settled) // never sent
		} else {
			kept = append(kept, c)
		}
	}
	return kept
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// send sends batches of the queue until it finds it empty; it then gives
// back its sender's slot.
func (b *Batcher) send() {
	for {
		b.mu.Lock()
		n := min(len(b.queue), MaxBatch)
		if n == 0 {
			b.queue = nil
			b.senders--
			b.mu.Unlock()
			return
		}
		batch := b.queue[:n:n]
		b.queue = b.queue[n:]
		b.mu.Unlock()
		b.exec(batch)
	}
}

// trip is a batch in flight: its round trip.
type trip struct {
	b     *Batcher
	batch []*call
	sent  time.Time
	timer *time.Timer

	mu    sync.Mutex // guards the fields below, and the err and done of the calls
	ended bool       // the round trip returned
	late  bool       // counted in b.overrun
	due   time.Time  // when timer was set to fire
	slips int        // times timer fired late in a row (see schedSlack)
}

// arm sets f's timer to fire in d. Caller holds f.mu.
func (f *trip) arm(d time.Duration) {
	f.due = time.Now().Add(d)
	if f.timer == nil {
		f.timer = time.AfterFunc(d, f.overdue)
		return
	}
	f.timer.Reset(d)
}

// schedSlack is how late a timer may fire and still judge Redis. A timer
// that fires later than that shows that the process itself did not run
// (a loaded machine, a long GC): a reply may wait in the socket for the
// sender to read it, so the timer looks again schedSlack later, up to
// maxSlips times in a row, before it takes the silence for Redis's.
const (
	schedSlack = 20 * time.Millisecond
	maxSlips   = 3
)

// exec sends one batch. go-redis bounds its retries and its dials by the
// batch's context, and with ContextTimeoutEnabled its socket reads: its
// deadline is the longest budget of the commands, at least holdFactor
// operation timeouts, so that a batch waiting its turn behind others at
// a busy Redis is not cut short. A timer frees each caller whose budget
// passes with no reply from Redis (see overdue).
func (b *Batcher) exec(batch []*call) {
	longest := batch[0].budget
	for _, c := range batch[1:] {
		longest = max(longest, c.budget)
	}
	f := &trip{b: b, batch: batch, sent: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), max(longest, holdFactor*b.timeout, time.Millisecond))
	defer cancel()
	f.mu.Lock()
	f.arm(max(min(longest, b.timeout), time.Millisecond))
	f.mu.Unlock()
	if len(batch) == 1 {
		_ = b.client.Process(ctx, batch[0].cmd)
	} else {
		pipe := b.client.Pipeline()
		for _, c := range batch {
			_ = pipe.Process(ctx, c.cmd)
		}
		_, _ = pipe.Exec(ctx) // each command holds its own error
	}
	f.end()
}

// holdFactor bounds, in operation timeouts, how long go-redis may hold a
// batch while Redis keeps answering the batcher's others.
const holdFactor = 4

// overdue runs on f's timer. A command is overdue once Redis has answered
// nothing for its budget since f was sent: no reply to f, nor to a batch
// of this batcher's that ended meanwhile (Redis then works through its
// queue, which holds the batcher's own commands). It frees the callers of
// the commands overdue; the first time, it counts f as overrun (and once
// every sender waits on such a batch, fails the queued commands); it sets
// the timer again for the next command to come due.
func (f *trip) overdue() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended {
		return
	}
	if time.Since(f.due) > schedSlack && f.slips < maxSlips {
		f.slips++
		f.arm(schedSlack)
		return
	}
	f.slips = 0
	b := f.b
	b.mu.Lock()
	spent := time.Since(later(f.sent, b.replied))
	b.mu.Unlock()
	var next time.Duration
	for _, c := range f.batch {
		switch {
		case c.err != nil:
		case c.budget <= spent:
			c.fail()
		case next == 0 || c.budget-spent < next:
			next = c.budget - spent
		}
	}
	lateAfter := lateFactor * b.timeout
	if !f.late && spent >= lateAfter {
		f.late = true
		b.mu.Lock()
		if b.overrun++; b.overrun == maxSenders {
			b.queue = failPrompt(b.queue, b.timeout)
		}
		b.mu.Unlock()
	}
	if !f.late && (next == 0 || lateAfter-spent < next) {
		next = lateAfter - spent
	}
	if next > 0 {
		f.arm(min(next, b.timeout))
	}
}

// lateFactor is how many operation timeouts a batch may go unanswered
// before it counts as overrun: while every sender waits on an overrun
// batch, queued and new commands fail at once. A batch that only missed
// its budget once (a new connection's handshake on a loaded machine)
// frees its own callers, but does not fail the others.
const lateFactor = 2

// end hands each command still waited for its result, and notes whether
// Redis replied.
func (f *trip) end() {
	replied := false
	for _, c := range f.batch {
		replied = replied || isReplyErr(c.cmd.Err())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ended = true
	f.timer.Stop()
	for _, c := range f.batch {
		if c.err == nil {
			close(c.done)
		}
		close(c.settled)
	}
	if f.late || replied {
		b := f.b
		b.mu.Lock()
		if f.late {
			b.overrun--
		}
		if replied {
			b.replied = time.Now()
		}
		b.mu.Unlock()
	}
}

// isReplyErr reports whether a command with error err got Redis's reply.
func isReplyErr(err error) bool {
	var re redis.Error
	return err == nil || errors.As(err, &re)
}
