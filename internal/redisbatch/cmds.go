package redisbatch

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// The commands that the [Batcher] carries for packages cache and lock.

// eval sends an EVAL-family command. name is any, so that the constant
// names of the callers are boxed at compile time.
func (b *Batcher) eval(ctx context.Context, name any, payload string, keys []string, args []any) *redis.Cmd {
	all := make([]any, 0, 3+len(keys)+len(args))
	all = append(all, name, payload, len(keys))
	for _, k := range keys {
		all = append(all, k)
	}
	all = append(all, args...)
	cmd := redis.NewCmd(ctx, all...)
	if err := b.process(ctx, cmd); err != nil {
		cmd = redis.NewCmd(ctx, all...)
		cmd.SetErr(err)
	}
	return cmd
}

// Eval implements redis.Scripter.
func (b *Batcher) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return b.eval(ctx, "eval", script, keys, args)
}

// EvalSha implements redis.Scripter.
func (b *Batcher) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return b.eval(ctx, "evalsha", sha, keys, args)
}

// EvalRO implements redis.Scripter.
func (b *Batcher) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return b.eval(ctx, "eval_ro", script, keys, args)
}

// EvalShaRO implements redis.Scripter.
func (b *Batcher) EvalShaRO(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return b.eval(ctx, "evalsha_ro", sha, keys, args)
}

// ScriptExists implements redis.Scripter, unbatched: it is not on any path
// of the pipeline's.
func (b *Batcher) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return b.client.ScriptExists(ctx, hashes...)
}

// ScriptLoad implements redis.Scripter, unbatched (on a Cluster, go-redis
// loads the script into every primary): package rscript loads a script
// with it once Redis answered NOSCRIPT. Like a batch, the load runs on a
// goroutine of its own, and the caller waits for it at most its budget.
func (b *Batcher) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	budget := b.budget(ctx)
	done := make(chan *redis.StringCmd, 1)
	go func() {
		// Not the caller's context, as for a batch (see exec): the load
		// is the batcher's round trip, not a child of the caller's span.
		lctx, cancel := context.WithTimeout(context.Background(), max(budget, holdFactor*b.timeout))
		defer cancel()
		done <- b.client.ScriptLoad(lctx, script)
	}()
	t := time.NewTimer(max(budget, time.Millisecond))
	defer t.Stop()
	var err error
	select {
	case cmd := <-done:
		return cmd
	case <-t.C:
		err = errNoReply
	case <-ctx.Done():
		err = ctx.Err()
	}
	cmd := redis.NewStringCmd(ctx, "script", "load", script)
	cmd.SetErr(err)
	return cmd
}

// HGet is the read of an L2 value.
func (b *Batcher) HGet(ctx context.Context, key, field string) *redis.StringCmd {
	cmd := redis.NewStringCmd(ctx, "hget", key, field)
	if err := b.process(ctx, cmd); err != nil {
		cmd = redis.NewStringCmd(ctx, "hget", key, field)
		cmd.SetErr(err)
	}
	return cmd
}

// Del is Invalidate's delete.
func (b *Batcher) Del(ctx context.Context, keys ...string) *redis.IntCmd {
	args := make([]any, 0, 1+len(keys))
	args = append(args, "del")
	for _, k := range keys {
		args = append(args, k)
	}
	cmd := redis.NewIntCmd(ctx, args...)
	if err := b.process(ctx, cmd); err != nil {
		cmd = redis.NewIntCmd(ctx, args...)
		cmd.SetErr(err)
	}
	return cmd
}

// PTTL is the lock's Inspect.
func (b *Batcher) PTTL(ctx context.Context, key string) *redis.DurationCmd {
	cmd := redis.NewDurationCmd(ctx, time.Millisecond, "pttl", key)
	if err := b.process(ctx, cmd); err != nil {
		cmd = redis.NewDurationCmd(ctx, time.Millisecond, "pttl", key)
		cmd.SetErr(err)
	}
	return cmd
}

// ProcessBatch sends cmds with the next batches (a batch read's or
// write's commands go out pipelined, in batches of at most MaxBatch, each
// with its own budget from when it is sent) and waits for their results.
// It returns errNoReply when Redis did not answer in time (see
// [Batcher]), or ctx's error when ctx ends first; the commands then belong
// to the batches. Packages cache and lock send their batches through it
// (internal/rscript).
func (b *Batcher) ProcessBatch(ctx context.Context, cmds []redis.Cmder) error {
	if len(cmds) == 0 {
		return nil
	}
	budget := b.budget(ctx)
	calls := make([]*call, len(cmds))
	for i, cmd := range cmds {
		calls[i] = newCall(cmd, budget)
	}
	b.enqueue(calls)
	for _, c := range calls {
		select {
		case <-c.done:
			if c.err != nil {
				return leftBatch(calls, c.err)
			}
		case <-ctx.Done():
			return leftBatch(calls, ctx.Err())
		}
	}
	return nil
}

// leftBatch is the error of a batch whose caller stopped waiting with
// err: it settles once every command of the batch has (see pendingError).
// The goroutine ends when the last of them settles, which each round trip
// does within its deadline.
func leftBatch(calls []*call, err error) error {
	settled := make(chan struct{})
	go func() {
		for _, c := range calls {
			<-c.settled
		}
		close(settled)
	}()
	return &pendingError{err: err, settled: settled}
}
