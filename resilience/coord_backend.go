package resilience

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/lock"
	"github.com/herdguard/herdguard/telemetry"
)

// backendCoord is the coordination seam over any [Shared] backend: its
// looks read, then lock, then read again (lookThenLock), its leases beat
// one by one, and a release is followed by a Notify, since the backend's
// Release need not wake anyone (its Save with Release does).
type backendCoord[V any] struct {
	p  *Pipeline[V]
	sh Shared
	// system names the backend on spans (db.system.name); nil when the
	// view does not say.
	system []attribute.KeyValue
}

var _ coord[int] = (*backendCoord[int])(nil)

func newBackendCoord[V any](p *Pipeline[V], sh Shared) *backendCoord[V] {
	c := &backendCoord[V]{p: p, sh: sh}
	if s, ok := sh.(interface{ System() string }); ok {
		c.system = []attribute.KeyValue{telemetry.DBSystemName.String(s.System())}
	}
	return c
}

func (c *backendCoord[V]) read(ctx context.Context, key string) (cache.Entry[V], cache.Freshness, error) {
	return c.p.l2Get(ctx, key)
}

func (c *backendCoord[V]) lookOrLock(ctx context.Context, key string, _ bool, w want) (look[V], error) {
	// The lease outlives the look's caller: the detached load holds
	// it, and releases it.
	return c.p.lookThenLock(ctx, context.WithoutCancel(ctx), key, w, c.read)
}

func (c *backendCoord[V]) lookOrLockMany(ctx context.Context, keys []string) ([]look[V], error) {
	return c.p.lookThenLockMany(ctx, keys, c.read), nil
}

func (c *backendCoord[V]) commit(ctx context.Context, key string, e cache.Entry[V], token string) (bool, error) {
	return c.p.l2.Commit(ctx, key, e, token)
}

func (c *backendCoord[V]) commitMany(ctx context.Context, writes []cache.Write[V]) ([]cache.Written, error) {
	return c.p.l2.SetMany(ctx, writes)
}

func (c *backendCoord[V]) extendMany(ctx context.Context, leases []*lock.Lease) ([]bool, error) {
	return extendEach(ctx, leases)
}

func (c *backendCoord[V]) release(ctx context.Context, key string, lease *lock.Lease) {
	notifyRelease(ctx, c.sh, key, lease)
}

// releaseMany releases the leases side by side, up to eachLimit at once.
func (c *backendCoord[V]) releaseMany(ctx context.Context, leases []*lock.Lease) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, eachLimit)
	for _, l := range leases {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			notifyRelease(ctx, c.sh, l.Key(), l)
		})
	}
	wg.Wait()
}

func (c *backendCoord[V]) mark() uint64 { return markOf(c.sh) }

func (c *backendCoord[V]) subscribe(key string, mark uint64) (<-chan struct{}, func(), bool) {
	return subscribeSince(c.sh, key, mark)
}

func (c *backendCoord[V]) subscribed() bool {
	s, ok := c.sh.(interface{ Subscribed() bool })
	return ok && s.Subscribed()
}

// check is the backend's Ping: a backend checks itself.
func (c *backendCoord[V]) check(ctx context.Context) error {
	if err := c.sh.Ping(ctx); err != nil {
		return &CheckError{Pipeline: c.p.name, Backend: backendName(c.sh), Problem: "the backend does not answer", Err: err}
	}
	return nil
}

func (c *backendCoord[V]) l2Attrs(_, backendOp string, more ...attribute.KeyValue) []attribute.KeyValue {
	as := append(append([]attribute.KeyValue(nil), c.system...), telemetry.DBOperationName.String(backendOp))
	return append(as, more...)
}

func (c *backendCoord[V]) failReason() string { return "backend_error" }
