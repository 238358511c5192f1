package resilience

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// ProcessBatch sends cmds together, in one batch (with whatever else is
// queued at that moment), and waits for their results: a batch read's or
// write's commands go out as one pipelined round trip, whoever else is
// sending. It returns ctx's error when ctx ends first; the commands then
// belong to the batch. It implements the BatchClient of package cache and
// package lock.
func (b *batcher) ProcessBatch(ctx context.Context, cmds []redis.Cmder) error {
	if len(cmds) == 0 {
		return nil
	}
	budget := b.timeout
	if d, ok := ctx.Value(budgetKey{}).(time.Duration); ok {
		budget = d
	} else if dl, ok := ctx.Deadline(); ok {
		budget = time.Until(dl)
	}
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
