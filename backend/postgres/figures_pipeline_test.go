package postgres

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/resilience"
)

// redisCounter is a go-redis hook that counts round trips: a command, or
// a pipeline of them, sent.
type redisCounter struct{ n atomic.Int64 }

func (c *redisCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *redisCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *redisCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

// side is one process's pipeline, with the round trips its client sent.
type side struct {
	p     *resilience.Pipeline[string]
	trips func() int64
}

// TestFigures_pipeline measures whole pipelines, on PostgreSQL and on
// Redis in the same run: a cold miss as its winner sees it, an L2 hit (a
// second pipeline of the same name, whose L1 is cold), and the wake-up of
// a waiter in that second pipeline, from the holder's loader returning to
// the waiter's call returning. Both pipelines live in the test process,
// each with its own connections, as two processes would have.
//
//	HERDGUARD_FIGURES=1 go test -count=1 -v -run TestFigures ./ | grep FIGURES
func TestFigures_pipeline(t *testing.T) {
	if os.Getenv(figuresEnv) == "" {
		t.Skip("set " + figuresEnv + "=1 to measure")
	}
	f := newFixture(t, Options{})
	pgSide := func() side {
		var c counter
		b := countedBackend(t, f, &c)
		p, err := resilience.New[string]("figures").Cache(time.Hour).Backend(b).
			BackendOptions(resilience.BackendOptions{OpTimeout: 2 * time.Second}).
			Lock(resilience.LockSettings{}).Build()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		return side{p: p, trips: c.n.Load}
	}
	measure(t, "postgres", pgSide(), pgSide())

	rs := redistest.Start(t)
	redisSide := func() side {
		var c redisCounter
		client := rs.Client()
		client.AddHook(&c)
		p, err := resilience.New[string]("figures").Cache(time.Hour).Redis(client).
			RedisOptions(resilience.RedisOptions{OpTimeout: 2 * time.Second}).
			Lock(resilience.LockSettings{}).Build()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close(); _ = client.Close() })
		return side{p: p, trips: c.n.Load}
	}
	measure(t, "redis", redisSide(), redisSide())
}

func measure(t *testing.T, label string, a, b side) {
	ctx := testCtx(t)
	const n = 300
	quick := func(_ context.Context, key string) (string, error) { return "value of " + key, nil }
	get := func(s side, key string, want string) time.Duration {
		t0 := time.Now()
		r, err := s.p.GetResult(ctx, key, quick)
		d := time.Since(t0)
		if err != nil || r.Source.String() != want || r.FailedOpen {
			t.Fatalf("%s %s: source %v failed open %v, %v; want %s", label, key, r.Source, r.FailedOpen, err, want)
		}
		return d
	}
	for i := range 20 { // warm the connections and prepared statements
		get(a, fmt.Sprintf("warm:%d", i), "loader")
		get(b, fmt.Sprintf("warm:%d", i), "l2")
	}
	var cold, hit []time.Duration
	start := a.trips()
	for i := range n {
		cold = append(cold, get(a, fmt.Sprintf("cold:%d", i), "loader"))
	}
	coldTrips := float64(a.trips()-start) / n
	start = b.trips()
	for i := range n {
		hit = append(hit, get(b, fmt.Sprintf("cold:%d", i), "l2"))
	}
	hitTrips := float64(b.trips()-start) / n

	var wake []time.Duration
	for i := range 100 {
		key := fmt.Sprintf("wake:%d", i)
		started, release := make(chan struct{}), make(chan struct{})
		holder := make(chan error, 1)
		go func() {
			_, err := a.p.Get(ctx, key, func(context.Context, string) (string, error) {
				close(started)
				<-release
				return "held", nil
			})
			holder <- err
		}()
		<-started
		waiter := make(chan time.Time, 1)
		go func() {
			v, err := b.p.Get(ctx, key, quick)
			if err != nil || v != "held" {
				t.Errorf("%s waiter: %q, %v", label, v, err)
			}
			waiter <- time.Now()
		}()
		time.Sleep(20 * time.Millisecond) // the waiter waits
		t0 := time.Now()
		close(release)
		wake = append(wake, (<-waiter).Sub(t0))
		if err := <-holder; err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("FIGURES %s pipeline: cold miss, the winner: %s; %.1f round trips", label, quantiles(cold), coldTrips)
	t.Logf("FIGURES %s pipeline: L2 hit (L1 cold): %s; %.1f round trips", label, quantiles(hit), hitTrips)
	t.Logf("FIGURES %s pipeline: waiter in another pipeline returns, after the holder's loader returned: %s", label, quantiles(wake))
}
