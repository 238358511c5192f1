package resilience

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/redistest"
)

// cmdLog records the names of the commands a client sends, pipelined
// ones included.
type cmdLog struct {
	mu    sync.Mutex
	names []string
}

func (l *cmdLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *cmdLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.add(cmd)
		return next(ctx, cmd)
	}
}

func (l *cmdLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			l.add(c)
		}
		return next(ctx, cmds)
	}
}

func (l *cmdLog) add(c redis.Cmder) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.names = append(l.names, c.Name())
}

// take returns the names logged since the last take.
func (l *cmdLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.names
	l.names = nil
	return n
}

var _ redis.Hook = (*cmdLog)(nil)

// TestLockedPath_commands checks what each path with Lock sends to Redis:
// an L1 miss on a key Redis holds fresh, which L1's copy says, is one
// plain HGET; a cold key's winner sends the look that tries the lock,
// then the write that releases and announces: two scripts.
func TestLockedPath_commands(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client()
	log := &cmdLog{}
	rdb.AddHook(log)
	p := build(t, New[string]("cmds").Cache(time.Hour).L1TTL(time.Nanosecond).Redis(rdb).Lock(LockSettings{}))
	ctx := context.Background()
	c := &counter{}
	// A first key loads the scripts and opens the connection.
	if _, err := p.Get(ctx, "warm", c.load); err != nil {
		t.Fatal(err)
	}

	log.take()
	r, err := p.GetResult(ctx, "cold", c.load)
	if err != nil || r.Source != SourceLoader {
		t.Fatalf("cold key: %+v, %v; want a load", r, err)
	}
	if got := log.take(); !slices.Equal(got, []string{"evalsha", "evalsha"}) {
		t.Fatalf("cold key's winner sent %q, want the look and the commit", got)
	}

	untilL1Stale(t, p, "cold")
	r, err = p.GetResult(ctx, "cold", c.load)
	if err != nil || r.Source != SourceL2 {
		t.Fatalf("L1 miss: %+v, %v; want an L2 hit", r, err)
	}
	if got := log.take(); !slices.Equal(got, []string{"hget"}) {
		t.Fatalf("an L2 hit sent %q, want one HGET", got)
	}
	if c.calls.Load() != 2 {
		t.Fatalf("loader calls = %d, want 2", c.calls.Load())
	}
}

// TestLockedPath_waiterWokenByAnnouncement checks what a waiter in another
// process sends to Redis: the look that finds the lock held, then, woken
// by the holder's announcement, one plain HGET, which finds the value.
func TestLockedPath_waiterWokenByAnnouncement(t *testing.T) {
	s := redistest.Start(t)
	holder := build(t, New[string]("wake").Cache(time.Hour).Redis(s.Client()).Lock(LockSettings{}))
	rdb := s.Client()
	log := &cmdLog{}
	rdb.AddHook(log)
	// No poll comes before the announcement.
	waiter := build(t, New[string]("wake").Cache(time.Hour).Redis(rdb).Lock(LockSettings{Poll: time.Hour}))
	ctx := context.Background()
	c := &counter{}
	// Warm keys load the scripts and open the connections.
	if _, err := holder.Get(ctx, "warm-a", c.load); err != nil {
		t.Fatal(err)
	}
	if _, err := waiter.Get(ctx, "warm-b", c.load); err != nil {
		t.Fatal(err)
	}
	c.gate = make(chan struct{})
	holderDone := make(chan error, 1)
	go func() {
		_, err := holder.Get(ctx, "k", c.load)
		holderDone <- err
	}()
	waitFor(t, func() bool { return c.calls.Load() == 3 })

	log.take()
	type res struct {
		r   Result[string]
		err error
	}
	waiterDone := make(chan res, 1)
	go func() {
		r, err := waiter.GetResult(ctx, "k", c.load)
		waiterDone <- res{r, err}
	}()
	// Once the look is sent, an announcement after it reaches the wait.
	var got []string
	waitFor(t, func() bool {
		got = append(got, log.take()...)
		return len(got) > 0
	})
	close(c.gate)
	if err := <-holderDone; err != nil {
		t.Fatal(err)
	}
	w := <-waiterDone
	if w.err != nil || w.r.Source != SourceWaited || w.r.Value != "v:k" {
		t.Fatalf("waiter: %+v, %v; want the holder's value, waited", w.r, w.err)
	}
	got = append(got, log.take()...)
	if !slices.Equal(got, []string{"evalsha", "hget"}) {
		t.Fatalf("the waiter sent %q, want the look and one HGET", got)
	}
	if n := c.calls.Load(); n != 3 {
		t.Fatalf("loader calls = %d, want 3 (two warm keys, one load of k)", n)
	}
}
