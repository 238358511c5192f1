package resilience

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher sends the Redis commands that the pipeline's callers issue at
// the same moment as one pipelined round trip (auto-pipelining). A burst
// of a thousand cold keys then costs Redis a few deep pipelines instead of
// a thousand round trips queued behind a pool of twenty connections, and a
// lone command still goes out at once, on its caller's goroutine.
//
// It implements the narrow clients of package cache and package lock
// (Scripter, HGet, Del, PTTL), so both run their commands through it
// unchanged; go-redis's Script.Run falls back from EVALSHA to EVAL through
// it too. Each batch runs under a deadline of its own, set when it is
// sent: as long as the longest time any of its commands still had (the
// operation timeout for the pipeline's operations, more for a release), so
// it measures Redis, not the time a command waited for the batch; the
// deadline holds on a hung server when the client has
// ContextTimeoutEnabled. A caller waiting for a batch that another sends
// stops waiting when its context ends; its command still runs, and the
// caller gets a fresh command holding the context's error, never one the
// batch may still write to. A caller that sends the batch itself waits
// for the reply, within the budget.
//
// batcher is safe for concurrent use.
type batcher struct {
	client  redis.UniversalClient
	timeout time.Duration

	mu       sync.Mutex // guards queue and flushers
	queue    []*call
	flushers int // batches being sent; at most maxFlushers
}

// maxFlushers bounds the batches in flight at once, each on a connection
// of its own.
const maxFlushers = 4

type call struct {
	cmd    redis.Cmder
	budget time.Duration // how long the command may take, from its ctx
	done   chan struct{} // closed once cmd holds its result
}

// budgetKey is the context key of how long a command may take once its
// round trip starts; set by [guard]. Without it, a command may take what
// is left of its context's deadline (a release), or the batcher's timeout.
type budgetKey struct{}

func newBatcher(client redis.UniversalClient, timeout time.Duration) *batcher {
	return &batcher{client: client, timeout: timeout}
}

// process sends cmd with the next batch and waits for its result. It
// reports false when ctx ended first: cmd then belongs to the batch.
func (b *batcher) process(ctx context.Context, cmd redis.Cmder) bool {
	budget := b.budget(ctx)
	b.mu.Lock()
	if b.flushers == 0 {
		// Nothing in flight, so nothing queued either: the command goes
		// out at once, alone, on the caller's goroutine, with nothing to
		// hand over and no call to wait on.
		b.flushers++
		b.mu.Unlock()
		_ = b.client.Process(batchContext(budget), cmd)
		if b.release() {
			go b.drain()
		}
		return true
	}
	c := &call{cmd: cmd, budget: budget, done: make(chan struct{})}
	b.queue = append(b.queue, c)
	lead := b.flushers < maxFlushers
	if lead {
		b.flushers++
	}
	b.mu.Unlock()
	if lead {
		// Another batch is in flight (a burst, or concurrent callers):
		// the caller sends the batch that holds its own command (unless
		// another sender took it first), then hands what queued meanwhile
		// to a goroutine, so that it is not kept sending others' batches.
		//
		// It first lets the goroutines already runnable go ahead: they
		// queue their commands, and this batch carries the burst instead
		// of going out with a handful while thousands of callers queue
		// behind the reply. Across processes, the looks of a cold key
		// then reach Redis in the order the processes got through their
		// bursts, so its lock goes to one that is ready to load, not to
		// one whose reply would wait behind its own burst. A lone
		// command (above) does not yield: a yield can hand the goroutine
		// to another thread, which costs a wake-up on an idle machine.
		runtime.Gosched()
		if b.send() {
			// The goroutine ends when it finds the queue empty.
			go b.drain()
		}
	}
	select {
	case <-c.done:
		return true
	case <-ctx.Done():
		return false
	}
}

// budget is how long a command sent under ctx may take once its round
// trip starts: see budgetKey.
func (b *batcher) budget(ctx context.Context) time.Duration {
	if d, ok := ctx.Value(budgetKey{}).(*time.Duration); ok {
		return *d
	}
	if dl, ok := ctx.Deadline(); ok {
		return time.Until(dl)
	}
	return b.timeout
}

// send sends one batch: the whole queue. It reports whether the queue
// filled again meanwhile, in which case the caller keeps its sender slot
// for the goroutine that drains it; otherwise the slot is given back.
func (b *batcher) send() (more bool) {
	b.mu.Lock()
	batch := b.queue
	b.queue = nil
	b.mu.Unlock()
	if len(batch) > 0 {
		b.exec(batch)
	}
	return b.release()
}

// release gives back a sender's slot, unless commands queued meanwhile:
// then it reports true, and the caller keeps the slot for the goroutine
// that drains them.
func (b *batcher) release() (more bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) > 0 {
		return true
	}
	b.flushers--
	return false
}

func (b *batcher) drain() {
	for b.send() {
	}
}

func (b *batcher) exec(batch []*call) {
	var budget time.Duration
	for _, c := range batch {
		budget = max(budget, c.budget)
	}
	ctx := batchContext(budget)
	if len(batch) == 1 {
		_ = b.client.Process(ctx, batch[0].cmd)
	} else {
		pipe := b.client.Pipeline()
		for _, c := range batch {
			_ = pipe.Process(ctx, c.cmd)
		}
		_, _ = pipe.Exec(ctx) // each command holds its own error
	}
	for _, c := range batch {
		close(c.done)
	}
}

// deadlineCtx is the context of a batch: a deadline and nothing else.
// go-redis bounds a command's socket writes and reads by its context's
// deadline (with ContextTimeoutEnabled); nobody cancels a batch, so the
// timer and the channel of context.WithTimeout would be work for nothing
// on every round trip. Done is nil: it never closes.
type deadlineCtx struct {
	context.Context // context.Background()
	d               time.Time
}

// batchContext is the context of a batch whose commands may take budget
// (at least a millisecond).
func batchContext(budget time.Duration) *deadlineCtx {
	return &deadlineCtx{Context: context.Background(), d: time.Now().Add(max(budget, time.Millisecond))}
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.d, true }

func (c *deadlineCtx) Err() error {
	if time.Now().Before(c.d) {
		return nil
	}
	return context.DeadlineExceeded
}

// eval sends an EVAL-family command. name is any, so that the constant
// names of the callers are boxed at compile time.
func (b *batcher) eval(ctx context.Context, name any, payload string, keys []string, args []any) *redis.Cmd {
	all := make([]any, 0, 3+len(keys)+len(args))
	all = append(all, name, payload, len(keys))
	for _, k := range keys {
		all = append(all, k)
	}
	all = append(all, args...)
	cmd := redis.NewCmd(ctx, all...)
	if !b.process(ctx, cmd) {
		cmd = redis.NewCmd(ctx, all...)
		cmd.SetErr(ctx.Err())
	}
	return cmd
}

// Eval implements redis.Scripter.
func (b *batcher) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return b.eval(ctx, "eval", script, keys, args)
}

// EvalSha implements redis.Scripter.
func (b *batcher) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return b.eval(ctx, "evalsha", sha, keys, args)
}

// EvalRO implements redis.Scripter.
func (b *batcher) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return b.eval(ctx, "eval_ro", script, keys, args)
}

// EvalShaRO implements redis.Scripter.
func (b *batcher) EvalShaRO(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return b.eval(ctx, "evalsha_ro", sha, keys, args)
}

// ScriptExists implements redis.Scripter, unbatched: it is not on any path
// of the pipeline's.
func (b *batcher) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return b.client.ScriptExists(ctx, hashes...)
}

// ScriptLoad implements redis.Scripter, unbatched, like ScriptExists.
func (b *batcher) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return b.client.ScriptLoad(ctx, script)
}

// HGet is the read of an L2 value.
func (b *batcher) HGet(ctx context.Context, key, field string) *redis.StringCmd {
	cmd := redis.NewStringCmd(ctx, "hget", key, field)
	if !b.process(ctx, cmd) {
		cmd = redis.NewStringCmd(ctx, "hget", key, field)
		cmd.SetErr(ctx.Err())
	}
	return cmd
}

// Del is Invalidate's delete.
func (b *batcher) Del(ctx context.Context, keys ...string) *redis.IntCmd {
	args := make([]any, 0, 1+len(keys))
	args = append(args, "del")
	for _, k := range keys {
		args = append(args, k)
	}
	cmd := redis.NewIntCmd(ctx, args...)
	if !b.process(ctx, cmd) {
		cmd = redis.NewIntCmd(ctx, args...)
		cmd.SetErr(ctx.Err())
	}
	return cmd
}

// PTTL is the lock's Inspect.
func (b *batcher) PTTL(ctx context.Context, key string) *redis.DurationCmd {
	cmd := redis.NewDurationCmd(ctx, time.Millisecond, "pttl", key)
	if !b.process(ctx, cmd) {
		cmd = redis.NewDurationCmd(ctx, time.Millisecond, "pttl", key)
		cmd.SetErr(ctx.Err())
	}
	return cmd
}

// ProcessBatch sends cmds together, in one batch (with whatever else is
// queued at that moment), and waits for their results: a batch read's or
// write's commands go out as one pipelined round trip, whoever else is
// sending. It returns ctx's error when ctx ends first; the commands then
// belong to the batch. Packages cache and lock send their batches through
// it (internal/rscript).
func (b *batcher) ProcessBatch(ctx context.Context, cmds []redis.Cmder) error {
	if len(cmds) == 0 {
		return nil
	}
	budget := b.budget(ctx)
	calls := make([]*call, len(cmds))
	for i, cmd := range cmds {
		calls[i] = &call{cmd: cmd, budget: budget, done: make(chan struct{})}
	}
	b.mu.Lock()
	b.queue = append(b.queue, calls...)
	lead := b.flushers < maxFlushers
	if lead {
		b.flushers++
	}
	b.mu.Unlock()
	if lead && b.send() {
		go b.drain()
	}
	for _, c := range calls {
		select {
		case <-c.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
