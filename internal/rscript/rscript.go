// Package rscript runs the Redis scripts of packages cache and lock, one
// key at a time, or as the batch scripts of many keys each ([Chunks]
// splits a batch into their runs, [RunWaves] sends them), always by their
// SHA: when
// Redis does not know a script (a new or restarted server), it is loaded
// once, for all the callers that met NOSCRIPT at the same moment, and run
// again by its SHA. A script's body never travels with EVAL: go-redis's
// Script.Run would send it once per caller, and a burst of a thousand cold
// keys meeting a restarted Redis would cost it a thousand bodies to hash,
// enough to hold the burst past its operation timeout.
package rscript

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"
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
	if err := load(ctx, client, script); err != nil {
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

// Run runs script once by its SHA, loading it first when Redis answers
// NOSCRIPT (see the package's doc). The command holds the script's reply
// or the error.
func Run(ctx context.Context, client redis.Scripter, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	cmd := client.EvalSha(ctx, script.Hash(), keys, args...)
	if !redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		return cmd
	}
	if err := load(ctx, client, script); err != nil {
		var re redis.Error
		if errors.As(err, &re) {
			// Redis refused the load (an ACL written before the load
			// was needed: EVAL without SCRIPT LOAD): send the body.
			return script.Eval(ctx, client, keys, args...)
		}
		cmd = redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	return client.EvalSha(ctx, script.Hash(), keys, args...)
}

// loads coalesces the loads of one script into one client: the callers
// that met NOSCRIPT together wait for one SCRIPT LOAD.
var loads singleflight.Group

// load loads script into client, or waits for the load already under way.
// The load runs under the context of the caller that started it, without
// its cancellation: a caller that stops waiting leaves it to the others.
func load(ctx context.Context, client redis.Scripter, script *redis.Script) error {
	key := fmt.Sprintf("%p %s", client, script.Hash())
	ch := loads.DoChan(key, func() (any, error) {
		return nil, script.Load(context.WithoutCancel(ctx), client).Err()
	})
	select {
	case r := <-ch:
		return r.Err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// MaxKeys bounds the cache keys that one run of a batch script handles:
// Redis runs nothing else while a script runs, and 128 keys take it well
// under a millisecond.
const MaxKeys = 128

// Wave bounds the batch scripts sent in one round trip by [RunWaves]: a
// round trip then carries at most Wave*MaxKeys cache keys, a few
// milliseconds of Redis's time, however large the batch.
const Wave = 4

// Chunks splits the cache keys 0..n-1 of a batch into the runs of a batch
// script, in order, each of at most [MaxKeys] keys. With slot non-nil (a
// Redis Cluster client), the keys of a run share a hash slot, slot(i)
// being key i's: a script's keys must.
func Chunks(n int, slot func(i int) uint16) [][]int {
	var out [][]int
	if slot == nil {
		for lo := 0; lo < n; lo += MaxKeys {
			run := make([]int, 0, min(MaxKeys, n-lo))
			for i := lo; i < min(lo+MaxKeys, n); i++ {
				run = append(run, i)
			}
			out = append(out, run)
		}
		return out
	}
	open := map[uint16]int{} // a slot's run still taking keys, by index in out
	for i := range n {
		s := slot(i)
		j, ok := open[s]
		if !ok || len(out[j]) == MaxKeys {
			j = len(out)
			open[s] = j
			out = append(out, nil)
		}
		out[j] = append(out[j], i)
	}
	return out
}

// RunWaves is [RunMany] sent in waves of at most [Wave] commands, one
// round trip after the other, for the batch scripts of a large batch. A
// wave that fails as a whole leaves its commands holding its error (fresh
// commands: the failed ones belong to their round trip), and the next
// waves still go; the error is the batch's only when every wave failed.
func RunWaves(ctx context.Context, client redis.Scripter, script *redis.Script, args [][]any) ([]redis.Cmder, error) {
	if len(args) <= Wave {
		return RunMany(ctx, client, script, args)
	}
	cmds := make([]redis.Cmder, 0, len(args))
	var first error
	ok := false
	for lo := 0; lo < len(args); lo += Wave {
		wave := args[lo:min(lo+Wave, len(args))]
		got, err := RunMany(ctx, client, script, wave)
		if err != nil {
			first = cmp.Or(first, err)
			for _, a := range wave {
				c := redis.NewCmd(ctx, append([]any{"evalsha", script.Hash()}, a...)...)
				c.SetErr(err)
				got = append(got, c)
			}
		} else {
			ok = true
		}
		cmds = append(cmds, got...)
	}
	if !ok {
		return nil, first
	}
	return cmds, nil
}
