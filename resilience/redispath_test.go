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

	time.Sleep(time.Millisecond) // past the L1 TTL
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
