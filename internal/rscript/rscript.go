// Package rscript sends batches of Redis commands for packages cache and
// lock: a batch in one round trip when the client can, and a script run
// once per key in one batch, by its SHA, loading it once when Redis does
// not know it.
package rscript

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// Batcher sends commands in one round trip; the pipeline's auto-pipelining
// client is one.
type Batcher interface {
	// ProcessBatch sends cmds in one round trip and returns once each
	// holds its reply or error, or with ctx's error when ctx ends first
	// (the commands may still run).
	ProcessBatch(ctx context.Context, cmds []redis.Cmder) error
}

// Send sends cmds in one round trip if client can (a [Batcher] or a
// go-redis client's pipeline), else one by one. The error is the batch's,
// when it failed as a whole; otherwise each command holds its own.
func Send(ctx context.Context, client any, cmds []redis.Cmder) error {
	switch c := client.(type) {
	case Batcher:
		return c.ProcessBatch(ctx, cmds)
	case interface{ Pipeline() redis.Pipeliner }:
		pipe := c.Pipeline()
		for _, cmd := range cmds {
			_ = pipe.Process(ctx, cmd)
		}
		_, _ = pipe.Exec(ctx) // each command holds its own error
		return ctx.Err()
	case interface {
		Process(context.Context, redis.Cmder) error
	}:
		for _, cmd := range cmds {
			_ = c.Process(ctx, cmd)
		}
		return ctx.Err()
	}
	return errors.New("the redis client can send neither pipelines nor single commands")
}

// RunMany runs script once per element of args (numkeys, keys...,
// argv...) in one round trip. When Redis did not know the script by its
// SHA (after a restart), it loads the script and sends those commands
// again: the batch never carries the script's source per command. The
// error is the batch's, when it failed as a whole; otherwise each command
// holds its own.
func RunMany(ctx context.Context, client redis.Scripter, script *redis.Script, args [][]any) ([]redis.Cmder, error) {
	cmds := make([]redis.Cmder, len(args))
	for i, a := range args {
		cmds[i] = redis.NewCmd(ctx, append([]any{"evalsha", script.Hash()}, a...)...)
	}
	if err := Send(ctx, client, cmds); err != nil {
		return nil, err
	}
	var again []int
	for i, c := range cmds {
		if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return cmds, nil
	}
	if err := script.Load(ctx, client).Err(); err != nil {
		return nil, err
	}
	retry := make([]redis.Cmder, len(again))
	for j, i := range again {
		retry[j] = redis.NewCmd(ctx, append([]any{"evalsha", script.Hash()}, args[i]...)...)
	}
	if err := Send(ctx, client, retry); err != nil {
		return nil, err
	}
	for j, i := range again {
		cmds[i] = retry[j]
	}
	return cmds, nil
}
