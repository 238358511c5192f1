package resilience

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/lock"
)

// infra guards Redis operations: a breaker shared by every pipeline on the
// same client, and a timeout per operation.
type infra struct {
	br        *breaker.Breaker
	opTimeout time.Duration
}

// redisBreakers holds one breaker per Redis client, so that every pipeline
// on a client learns at once that it is down.
var redisBreakers sync.Map // redis.UniversalClient -> *breaker.Breaker

func redisBreaker(client redis.UniversalClient, s breaker.Settings) (*breaker.Breaker, error) {
	if b, ok := redisBreakers.Load(client); ok {
		return b.(*breaker.Breaker), nil
	}
	if s.Name == "" {
		s.Name = "redis"
	}
	if s.OpenTimeout == 0 {
		s.OpenTimeout = DefaultRedisOpenTimeout
	}
	b, err := breaker.New(s)
	if err != nil {
		return nil, err
	}
	actual, _ := redisBreakers.LoadOrStore(client, b)
	return actual.(*breaker.Breaker), nil
}

// settle records an operation's outcome with the Redis breaker.
func settle(ctx context.Context, done func(error, time.Duration), err error, took time.Duration) {
	switch {
	case err == nil, errors.Is(err, lock.ErrNotAcquired), errors.Is(err, lock.ErrNotHeld),
		errors.Is(err, cache.ErrExpiredEntry):
		done(nil, took)
	case ctx.Err() != nil:
		done(breaker.Ignore, took)
	default:
		done(err, took)
	}
}

// guarded is one operation run by [guard]: state 0 while it runs, 1 once
// it has finished (and ready is closed), 2 once the caller has given up.
type guarded[T any] struct {
	v     T
	err   error
	state atomic.Int32
	ready chan struct{}
}

// guard runs one Redis operation through the Redis breaker, bounded by the
// per-operation timeout even when the client ignores context deadlines:
// go-redis does unless its ContextTimeoutEnabled option is set, and then
// waits out its ReadTimeout (5 seconds by default) on a hung server. An
// operation still running at the timeout is abandoned: it finishes on its
// own goroutine, bounded by the client's own timeouts, and its result goes
// to late if not nil (to undo a side effect), else is dropped. The caller
// gets an error matching context.DeadlineExceeded, which counts against the
// breaker.
func guard[T any](ctx context.Context, in *infra, name string, op func(context.Context) (T, error), late func(T, error)) (T, error) {
	if in == nil { // the embedded default: nothing to guard
		return op(ctx)
	}
	var zero T
	done, err := in.br.Allow()
	if err != nil {
		return zero, err
	}
	octx, cancel := context.WithTimeout(ctx, in.opTimeout)
	start := time.Now()
	g := &guarded[T]{ready: make(chan struct{})}
	go func() {
		defer cancel()
		v, err := op(octx)
		g.v, g.err = v, err
		if g.state.CompareAndSwap(0, 1) {
			close(g.ready)
		} else if late != nil {
			late(v, err)
		}
	}()
	select {
	case <-g.ready:
	case <-octx.Done():
		if g.state.CompareAndSwap(0, 2) {
			err := fmt.Errorf("resilience: redis %s: no reply within %v: %w", name, in.opTimeout, context.DeadlineExceeded)
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			settle(ctx, done, err, time.Since(start))
			return zero, err
		}
		<-g.ready // finished just now: closed right after the swap
	}
	settle(ctx, done, g.err, time.Since(start))
	return g.v, g.err
}

// wireRedis builds the Redis cache, and with Lock, the Redis lock and
// notifier.
func (p *Pipeline[V]) wireRedis(c config[V]) error {
	o := c.redisOpts
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.OpTimeout == 0 {
		o.OpTimeout = DefaultRedisTimeout
	}
	bs := o.Breaker
	bs.OnStateChange = p.breakerObserver(bs.OnStateChange, c.onBreaker)
	br, err := redisBreaker(c.redis, bs)
	if err != nil {
		return &ConfigError{Pipeline: c.name, Field: "RedisOptions", Problem: err.Error()}
	}
	p.infra = &infra{br: br, opTimeout: o.OpTimeout}
	l2, err := cache.NewRedis[V](c.redis, cache.RedisOptions{
		Prefix: o.Prefix, Namespace: c.name, Codec: o.Codec,
		OnCorrupt: func(string, error) {
			if p.tel.Metering() {
				p.tel.Corrupt(context.Background(), "l2")
			}
		},
	})
	if err != nil {
		return &ConfigError{Pipeline: c.name, Field: "Redis", Problem: err.Error()}
	}
	p.l2 = l2
	if !c.lockOn {
		return nil
	}
	lk, err := lock.NewRedis(c.redis, lock.RedisOptions{Prefix: o.Prefix, Namespace: c.name})
	if err != nil {
		return &ConfigError{Pipeline: c.name, Field: "Lock", Problem: err.Error()}
	}
	n, err := lock.NewRedisNotifier(c.redis, lock.RedisOptions{Prefix: o.Prefix, Namespace: c.name})
	if err != nil {
		return &ConfigError{Pipeline: c.name, Field: "Lock", Problem: err.Error()}
	}
	p.locker, p.notifier = lk, n
	p.closers = append(p.closers, n.Close)
	return nil
}
