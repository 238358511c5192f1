package resilience

import (
	"context"
	"errors"
	"sync"
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

// do runs op through the breaker with the per-operation timeout. Outcomes
// that say nothing about Redis's health (lock held by another, the caller
// gone) do not count against the breaker.
func (in *infra) do(ctx context.Context, name string, op func(context.Context) error) error {
	if in == nil { // the embedded default: nothing to guard
		return op(ctx)
	}
	done, err := in.br.Allow()
	if err != nil {
		return err
	}
	octx, cancel := context.WithTimeout(ctx, in.opTimeout)
	start := time.Now()
	err = op(octx)
	cancel()
	switch {
	case err == nil, errors.Is(err, lock.ErrNotAcquired), errors.Is(err, lock.ErrNotHeld):
		done(nil, time.Since(start))
	case ctx.Err() != nil:
		done(breaker.Ignore, time.Since(start))
	default:
		done(err, time.Since(start))
	}
	return err
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
