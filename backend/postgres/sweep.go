package postgres

import (
	"context"
	"math/rand/v2"
	"time"
)

const (
	// sweepBatch is how many rows one DELETE removes at most.
	sweepBatch = 500
	// sweepBatches bounds the batches of one sweep; the next sweep goes on.
	sweepBatches = 20
)

// startSweeper starts a goroutine that deletes expired rows every about
// every (jittered), and returns the function that stops it and waits for
// it. A negative every starts nothing.
func startSweeper(b *Backend, every time.Duration) (stop func()) {
	if every < 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			t := time.NewTimer(every/2 + rand.N(every/2+1))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			_ = b.sweep(ctx)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// sweep deletes, in batches, the values past their Until, the lock rows
// idle for longer than the fence retention, and the beats of leases that
// have ended, of every namespace.
// Concurrent sweeps skip each other's rows.
func (b *Backend) sweep(ctx context.Context) error {
	if err := b.ready(ctx); err != nil {
		return err
	}
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{b.q.sweepValues, []any{sweepBatch}},
		{b.q.sweepLocks, []any{sweepBatch, b.o.FenceRetention.Microseconds()}},
		{b.q.sweepBeats, []any{sweepBatch}},
	} {
		for range sweepBatches {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			tag, err := b.pool.Exec(sctx, q.sql, q.args...)
			cancel()
			if err != nil {
				return err
			}
			if tag.RowsAffected() < sweepBatch {
				break
			}
		}
	}
	return nil
}
