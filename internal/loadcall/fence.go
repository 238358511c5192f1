package loadcall

import "context"

// fenceKey is the context key of the fences of a locked load.
type fenceKey struct{}

// loadFences are the fences of one load: of key, or of each key of many.
type loadFences struct {
	key   string
	fence int64
	many  map[string]int64
}

// WithFence is ctx for a load of key under a grant of fence.
func WithFence(ctx context.Context, key string, fence int64) context.Context {
	return context.WithValue(ctx, fenceKey{}, &loadFences{key: key, fence: fence})
}

// WithFences is ctx for a batch load: many holds the fences of its keys
// under a lease; with none, ctx as it is.
func WithFences(ctx context.Context, many map[string]int64) context.Context {
	if many == nil {
		return ctx
	}
	return context.WithValue(ctx, fenceKey{}, &loadFences{many: many})
}

// Fence is the fence under which the load of ctx runs for key (package
// resilience's Fence, which documents it); ok is false when ctx is not
// that of a locked load of key.
func Fence(ctx context.Context, key string) (fence int64, ok bool) {
	f, _ := ctx.Value(fenceKey{}).(*loadFences)
	if f == nil {
		return 0, false
	}
	if f.many != nil {
		fence, ok = f.many[key]
		return fence, ok
	}
	if f.key == key {
		return f.fence, true
	}
	return 0, false
}
