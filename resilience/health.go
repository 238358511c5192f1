package resilience

import (
	"github.com/herdguard/herdguard/breaker"
)

// Health is a snapshot of what a pipeline depends on, for a readiness
// probe or an admin page.
type Health struct {
	// Breakers holds the state of each of the pipeline's breakers by
	// name: the loader's (named after the pipeline unless
	// breaker.Settings.Name says otherwise) with Breaker, and the Redis
	// one ("redis" unless named otherwise) with Redis, or the backend's
	// ("backend") with a Backend.
	Breakers map[string]breaker.State
	// Subscribed is set when the pipeline, with Redis, has its
	// announcement subscription confirmed by Redis and alive: a
	// subscription whose connection carries no byte for
	// 3 s (a PING included) is taken for dead and
	// reported down until a new one is confirmed. Without it, waiters
	// fall back to their poll, and other processes' Set and Invalidate
	// reach this one's L1 only when it comes back (see Invalidate). With
	// a Backend, it is the view's Subscribed() when it has that method,
	// and false otherwise.
	Subscribed bool
}

// Health reports the state of the pipeline's breakers and of its Redis
// subscription. It is cheap and safe for concurrent use.
func (p *Pipeline[V]) Health() Health {
	h := Health{Breakers: map[string]breaker.State{}}
	if p.br != nil {
		h.Breakers[p.br.Name()] = p.br.State()
	}
	if p.redisGuard != nil {
		h.Breakers[p.redisGuard.Breaker.Name()] = p.redisGuard.Breaker.State()
	}
	if p.co != nil {
		h.Subscribed = p.co.Subscribed()
	}
	return h
}
