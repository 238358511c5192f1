package loadcall

import (
	"context"
	"sync/atomic"
	"time"
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
