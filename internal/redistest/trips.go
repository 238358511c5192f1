package redistest

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Trips is a go-redis hook (add it with AddHook) that counts a client's
// round trips and commands: a command alone is one of each, a pipeline
// one round trip of its commands. A new connection's handshake is not
// counted.
type Trips struct{ RoundTrips, Commands atomic.Int64 }

var _ redis.Hook = (*Trips)(nil)

// DialHook implements redis.Hook.
func (c *Trips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (c *Trips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake(cmd) {
			c.RoundTrips.Add(1)
			c.Commands.Add(1)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (c *Trips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !handshake(cmds[0]) {
			c.RoundTrips.Add(1)
			c.Commands.Add(int64(len(cmds)))
		}
		return next(ctx, cmds)
	}
}

// handshake reports whether cmd is part of a new connection's handshake.
func handshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}
