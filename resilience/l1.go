package resilience

import (
	"context"
	"time"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/rcache"
)

// lookup is a call's one L1 read (a pipeline without L1 always misses).
// It reports done when the fresh entry it found answers the call with
// nothing more to record than a count: no span, since tracing is off or
// the caller's span is not sampled (see [telemetry.Config.HitSpans]).
// Otherwise [Pipeline.call] goes on from what it found. It allocates
// nothing on a hit.
func (p *Pipeline[V]) lookup(ctx context.Context, key string, load LoadFunc[V]) (rcache.Hit[V], cache.Freshness, bool) {
	if p.l1 == nil {
		return rcache.Hit[V]{}, cache.Miss, false
	}
	h, f := p.l1.Find(key)
	if f != cache.Fresh {
		return h, f, false
	}
	if p.beta > 0 && p.refreshEarly(h) {
		p.refreshAsync(ctx, key, load, h.Written())
	}
	if p.tel.Tracing() && p.tel.HitSpans(ctx) {
		return h, f, false
	}
	p.stats.l1Hit()
	return h, f, true
}

// fillL1 copies an entry read from L2 into L1, keeping L1's TTL no longer
// than L1TTL, unless key was written or dropped since o's load began.
func (p *Pipeline[V]) fillL1(key string, e cache.Entry[V], o *outcome[V]) {
	if p.l1 == nil {
		return
	}
	if limit := time.Now().Add(p.l1TTL); e.Expires.After(limit) {
		e.Expires = limit
		if e.StaleUntil.Before(limit) {
			e.StaleUntil = limit
		}
	}
	p.fillIfCurrent(key, e, o.gen)
}
