package resilience

import (
	"context"

	"github.com/herdguard/herdguard/cache"
)

// Peek returns key's value if a cache holds it fresh: L1, then Redis (with
// Redis). It never calls a loader nor takes a lock, and does not put what
// it finds in L1. found is false on a miss or a stale entry; a stored
// not-found returns [ErrNotFound]. A Redis failure is returned with found
// false.
func (p *Pipeline[V]) Peek(ctx context.Context, key string) (v V, found bool, err error) {
	if err := p.checkWrite(ctx, key, "Peek"); err != nil {
		return v, false, err
	}
	if e, f := p.l1.Lookup(key); f == cache.Fresh {
		if e.NotFound {
			return v, false, ErrNotFound
		}
		return p.out(e.Value), true, nil
	}
	if p.l2 == nil {
		return v, false, nil
	}
	e, f, err := p.co.Read(ctx, key)
	switch {
	case err != nil || f != cache.Fresh:
		return v, false, err
	case e.NotFound:
		return v, false, ErrNotFound
	}
	return p.out(e.Value), true, nil
}
