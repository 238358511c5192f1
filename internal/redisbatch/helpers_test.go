package redisbatch

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// tripCounter counts a client's round trips: each command alone, each
// pipeline once.
type tripCounter struct{ trips, cmds atomic.Int64 }

func (c *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !setup(cmd) {
			c.trips.Add(1)
			c.cmds.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !setup(cmds[0]) {
			c.trips.Add(1)
			c.cmds.Add(int64(len(cmds)))
		}
		return next(ctx, cmds)
	}
}

// setup reports whether cmd is part of a new connection's handshake.
func setup(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}

// within waits until cond holds, at most bound, and returns how long that
// took.
func within(t *testing.T, bound time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > bound {
			t.Fatalf("%s: not within %v", what, bound)
		}
		time.Sleep(time.Millisecond)
	}
	return time.Since(start)
}

// waitFor is within with a bound of 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	within(t, 5*time.Second, "condition", cond)
}
