package resilience

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/telemetry"
)

// backendCoord is the coordination seam over any [backend.Shared] backend: its
// looks read, then lock, then read again (lookThenLock), its leases beat
// one by one, and a release is followed by a Notify, since the backend's
// Release need not wake anyone (its Save with Release does).
type backendCoord[V any] struct {
	p  *Pipeline[V]
	sh backend.Shared
	// system names the backend on spans (db.system.name); nil when the
	// view does not say.
	system []attribute.KeyValue
}

var _ coord[int] = (*backendCoord[int])(nil)

func newBackendCoord[V any](p *Pipeline[V], sh backend.Shared) *backendCoord[V] {
	c := &backendCoord[V]{p: p, sh: sh}
	if s, ok := sh.(interface{ System() string }); ok {
		c.system = []attribute.KeyValue{telemetry.DBSystemName.String(s.System())}
	}
	return c
}

func (c *backendCoord[V]) read(ctx context.Context, key string) (rcache.Entry[V], cache.Freshness, error) {
	return c.p.l2Get(ctx, key)
}

func (c *backendCoord[V]) lookOrLock(ctx context.Context, key string, _ bool, w want) (look[V], error) {
	// The lease outlives the look's caller: the detached load holds
	// it, and releases it.
	return c.p.lookThenLock(ctx, context.WithoutCancel(ctx), key, w, c.read)
}

func (c *backendCoord[V]) lookOrLockMany(ctx context.Context, keys []string) ([]look[V], error) {
	if bm, ok := c.sh.(backend.SharedMany); ok {
		return c.lookThenLockBatch(ctx, bm, keys)
	}
	return c.p.lookThenLockMany(ctx, keys, c.read), nil
}

// lookThenLockBatch is lookThenLockMany over a view with [backend.SharedMany]:
// one LoadMany of every key, one TryAcquireMany of those not fresh, and
// one LoadMany of those granted, since another process may have written
// them in between (a value found then gives the lease back). Each lease
// won beats from its grant, as lookThenLock's does.
func (c *backendCoord[V]) lookThenLockBatch(ctx context.Context, bm backend.SharedMany, keys []string) ([]look[V], error) {
	looks := make([]look[V], len(keys))
	if err := c.readMany(ctx, bm, keys, func(i int, e rcache.Entry[V], f cache.Freshness) {
		looks[i] = look[V]{e: e, f: f}
	}); err != nil {
		return nil, err // recorded by readMany
	}
	var todo []int
	var tkeys []string
	for i, k := range keys {
		if looks[i].f != cache.Fresh {
			todo, tkeys = append(todo, i), append(tkeys, k)
		}
	}
	if len(todo) == 0 {
		return looks, nil
	}
	type acquired struct {
		leases []*backend.Lease
		errs   []error
	}
	a, err := guard(ctx, c.p.redisGuard, func(ctx context.Context) (acquired, error) {
		leases, errs := bm.TryAcquireMany(ctx, tkeys, c.p.lockCfg.Lease)
		for _, err := range errs {
			if err != nil && !errors.Is(err, backend.ErrNotAcquired) {
				return acquired{leases, errs}, err // the breaker hears it
			}
		}
		return acquired{leases, errs}, nil
	})
	var won []int // indexes in keys
	var wkeys []string
	var grants []*grant
	for j, i := range todo {
		var lease *backend.Lease
		kerr := err
		if j < len(a.leases) && j < len(a.errs) {
			lease, kerr = a.leases[j], a.errs[j]
			if kerr == nil && lease == nil {
				kerr = errors.New("resilience: TryAcquireMany returned no lease and no error")
			}
		}
		switch {
		case kerr == nil:
			won, wkeys = append(won, i), append(wkeys, keys[i])
			grants = append(grants, c.p.hold(ctx, lease))
		case errors.Is(kerr, backend.ErrNotAcquired):
			looks[i].err = kerr
		default:
			if lease != nil {
				c.p.release(ctx, keys[i], lease)
			}
			if ctx.Err() == nil {
				c.p.failOpen(ctx, nil, "lock_acquire", kerr)
			}
			looks[i].err = kerr
		}
	}
	if len(won) == 0 {
		return looks, nil
	}
	var back []*backend.Lease // the leases to give back
	err = c.readMany(ctx, bm, wkeys, func(j int, e rcache.Entry[V], f cache.Freshness) {
		lk := &looks[won[j]]
		switch {
		case f == cache.Fresh:
			grants[j].end() // given back below: its beats stop
			back = append(back, grants[j].lease)
			*lk = look[V]{e: e, f: f}
			return
		case f == cache.Stale:
			lk.e, lk.f = e, f
		}
		lk.lease, lk.g = grants[j].lease, grants[j]
	})
	switch {
	case err != nil && ctx.Err() != nil:
		// The caller left: the looks end with it, and grant nothing.
		for j, i := range won {
			grants[j].end() // given back below: its beats stop
			back = append(back, grants[j].lease)
			looks[i].err = err
		}
	case err != nil:
		// The backend failed between the grants and now: load, and skip
		// the write-backs, which would fail too.
		for j, i := range won {
			looks[i].lease, looks[i].g, looks[i].readFailed = grants[j].lease, grants[j], err
		}
	}
	c.p.releaseMany(ctx, back)
	return looks, nil
}

// readMany reads keys with LoadMany, as one span and one operation of the
// breaker, and hands each key's entry to got (a per-key data problem is a
// miss). Its error is recorded.
func (c *backendCoord[V]) readMany(ctx context.Context, bm backend.SharedMany, keys []string, got func(i int, e rcache.Entry[V], f cache.Freshness)) error {
	var sp trace.Span
	if c.p.tel.Tracing() {
		ctx, sp = c.p.tel.Start(ctx, telemetry.SpanL2, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(c.l2Attrs("HGET", "LoadMany", attrKeys.Int(len(keys)))...))
		defer sp.End()
	}
	raws, err := guard(ctx, c.p.redisGuard, func(ctx context.Context) ([][]byte, error) {
		raws, err := bm.LoadMany(ctx, keys)
		if err == nil && len(raws) != len(keys) {
			err = fmt.Errorf("resilience: LoadMany returned %d answers for %d keys", len(raws), len(keys))
		}
		return raws, err
	})
	if err != nil {
		c.p.failOpen(ctx, sp, "l2_get", err)
		return err
	}
	for i, k := range keys {
		if raws[i] == nil {
			got(i, rcache.Entry[V]{}, cache.Miss)
			continue
		}
		e, f := c.p.l2.Decode(k, raws[i])
		got(i, e, f)
	}
	return nil
}

func (c *backendCoord[V]) commit(ctx context.Context, key string, e rcache.Entry[V], token string) (bool, error) {
	return c.p.l2.Commit(ctx, key, e, token)
}

// commitMany writes side by side, up to eachLimit at once, as
// lookOrLockMany looks: a backend's calls of concurrent callers share its
// statements (PostgreSQL batches them), where the store's SetMany, one
// write after another, would cost a chunk of 4,096 keys 4,096 sequential
// round trips.
func (c *backendCoord[V]) commitMany(ctx context.Context, writes []rcache.Write[V]) ([]rcache.Written, error) {
	if len(writes) <= 1 {
		return c.p.l2.SetMany(ctx, writes)
	}
	out := make([]rcache.Written, len(writes))
	errs := make([]error, len(writes))
	var g errgroup.Group
	g.SetLimit(backendEachLimit)
	for i := range writes {
		// Each goroutine writes its own write's outcome.
		g.Go(func() error {
			ws, err := c.p.l2.SetMany(ctx, writes[i:i+1])
			switch {
			case err != nil:
				errs[i] = err
			case len(ws) == 1:
				out[i] = ws[0]
			}
			return nil
		})
	}
	_ = g.Wait()
	for i, err := range errs {
		if err != nil {
			out[i].Err = err
		}
	}
	return out, nil
}

// backendEachLimit bounds the writes a backend's batch sends at once.
const backendEachLimit = 512

func (c *backendCoord[V]) extendMany(ctx context.Context, leases []*backend.Lease) ([]bool, error) {
	return extendEach(ctx, leases)
}

func (c *backendCoord[V]) release(ctx context.Context, key string, lease *backend.Lease) {
	notifyRelease(ctx, c.sh, key, lease)
}

// releaseMany releases the leases side by side, up to eachLimit at once.
func (c *backendCoord[V]) releaseMany(ctx context.Context, leases []*backend.Lease) {
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
