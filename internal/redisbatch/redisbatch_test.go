package redisbatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/redistest"
)

func batcherOn(t *testing.T, srv *redistest.Server, timeout time.Duration) (*Batcher, *redistest.Trips, *redis.Client) {
	t.Helper()
	rdb := srv.Client()
	tc := new(redistest.Trips)
	rdb.AddHook(tc)
	ctx := redistest.Context(t, 5*time.Second)
	for i := range 256 {
		if err := rdb.HSet(ctx, fmt.Sprintf("h%d", i), "v", fmt.Sprint(i)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	tc.RoundTrips.Store(0)
	tc.Commands.Store(0)
	return New(rdb, timeout), tc, rdb
}

// TestBatcher_loneCommandGoesAloneAtOnce: with nothing in flight, a
// command is one round trip of its own, and gives its reply.
func TestBatcher_loneCommandGoesAloneAtOnce(t *testing.T) {
	b, tc, _ := batcherOn(t, redistest.Start(t), time.Second)
	ctx := redistest.Context(t, 5*time.Second)
	for i := range 5 {
		v, err := b.HGet(ctx, fmt.Sprintf("h%d", i), "v").Result()
		if err != nil || v != fmt.Sprint(i) {
			t.Fatalf("HGet h%d = %q, %v; want %q", i, v, err, fmt.Sprint(i))
		}
	}
	if trips, cmds := tc.RoundTrips.Load(), tc.Commands.Load(); trips != 5 || cmds != 5 {
		t.Fatalf("5 lone commands took %d round trips for %d commands; want 5 for 5", trips, cmds)
	}
}

// TestBatcher_burstSharesRoundTrips: commands issued at once by many
// goroutines go out together, in far fewer round trips than commands,
// and each caller gets its own reply.
func TestBatcher_burstSharesRoundTrips(t *testing.T) {
	const n = 256
	b, tc, _ := batcherOn(t, redistest.Start(t), time.Second)
	ctx := redistest.Context(t, 10*time.Second)
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			v, err := b.HGet(ctx, fmt.Sprintf("h%d", i), "v").Result()
			if err != nil || v != fmt.Sprint(i) {
				errs <- fmt.Errorf("HGet h%d = %q, %v", i, v, err)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if trips, cmds := tc.RoundTrips.Load(), tc.Commands.Load(); cmds != n || trips > n/4 {
		t.Fatalf("%d commands at once took %d round trips for %d commands; want at most %d for %d", n, trips, cmds, n/4, n)
	}
	t.Logf("%d commands: %d round trips", n, tc.RoundTrips.Load())
}

// TestBatcher_hungServer: on a stopped server, a command returns once its
// budget (the batcher's timeout) is spent; a caller queued behind the
// batches in flight whose context ends returns at once with the context's
// error; afterwards the batcher works again.
func TestBatcher_hungServer(t *testing.T) {
	srv := redistest.Start(t)
	b, tc, _ := batcherOn(t, srv, 300*time.Millisecond)
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = srv.Resume()
		}
	}()
	// No deadline: a command's budget is the batcher's timeout.
	ctx := context.Background()
	var wg sync.WaitGroup
	senders := make([]error, maxSenders)
	for i := range senders {
		wg.Go(func() { senders[i] = b.HGet(ctx, fmt.Sprintf("h%d", i), "v").Err() })
		// Each sends a batch of its own: the command has gone out.
		waitFor(t, func() bool { return tc.RoundTrips.Load() == int64(i+1) })
	}
	queued, cancel := context.WithCancel(ctx)
	var leaving error
	wg.Go(func() { leaving = b.HGet(queued, "h9", "v").Err() })
	// It waits in the queue, behind the batches in flight.
	waitFor(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.queue) == 1
	})
	cancel()
	wg.Wait()
	for i, err := range senders {
		if err == nil || errors.Is(err, context.Canceled) {
			t.Fatalf("sender %d on a stopped server got %v; want its budget's timeout", i, err)
		}
	}
	if !errors.Is(leaving, context.Canceled) {
		t.Fatalf("the queued caller whose context ended got %v; want context.Canceled", leaving)
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	var v string
	var err error
	within(t, 5*time.Second, "a reply after the server came back", func() bool {
		v, err = b.HGet(ctx, "h3", "v").Result()
		return err == nil
	})
	if v != "3" {
		t.Fatalf("after the server came back: %q, %v; want \"3\"", v, err)
	}
}
