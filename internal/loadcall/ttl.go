package loadcall

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/rcache"
)

// TTL carries a TTL from the loader to the pipeline.
type TTL struct{ d atomic.Int64 }

type ttlKey struct{}

// WithTTL gives the loader's context a place for SetTTL.
func WithTTL(ctx context.Context) (context.Context, *TTL) {
	h := new(TTL)
	return context.WithValue(ctx, ttlKey{}, h), h
}

// SetTTL sets the TTL of the value the loader of ctx is about to return,
// as given (resilience clamps it first). It reports false, doing nothing,
// when ctx does not come from WithTTL.
func SetTTL(ctx context.Context, d time.Duration) bool {
	if ctx == nil {
		return false
	}
	h, ok := ctx.Value(ttlKey{}).(*TTL)
	if !ok {
		return false
	}
	h.d.Store(int64(d))
	return true
}

// Get is the TTL the loader set; 0 if it set none.
func (h *TTL) Get() time.Duration { return time.Duration(h.d.Load()) }

// Lifetimes are how long a loaded entry lives: a value is fresh for TTL,
// then stale for Grace; a not-found is fresh for NegativeTTL, with no
// grace. Jitter shortens each TTL by up to that fraction, at random (see
// cache.Jitter), so that keys loaded together do not expire together.
type Lifetimes struct {
	TTL, Grace, NegativeTTL time.Duration
	Jitter                  float64
}

// Stamp is the entry of v, or of a not-found, loaded just now in took
// under a grant of fence (0: unlocked). set is the TTL the loader set
// with SetTTL (0: none): a value keeps it when shorter than l.TTL; a
// not-found keeps l.NegativeTTL.
func Stamp[V any](l Lifetimes, v V, notFound bool, took time.Duration, fence int64, set time.Duration) rcache.Entry[V] {
	now := time.Now()
	ttl, grace := l.TTL, l.Grace
	switch {
	case notFound:
		ttl, grace = l.NegativeTTL, 0
	case set != 0:
		ttl = min(set, l.TTL)
	}
	ttl = cache.Jitter(ttl, l.Jitter)
	return rcache.Entry[V]{
		Value: v, NotFound: notFound,
		Written: now, Expires: now.Add(ttl), StaleUntil: now.Add(ttl + grace),
		LoadDuration: took, Fence: fence,
	}
}
