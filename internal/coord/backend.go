package coord

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
	d  Deps[V]
	sh backend.Shared
	// system names the backend on spans (db.system.name); nil when the
	// view does not say.
	system []attribute.KeyValue
}

var _ Coord[int] = (*backendCoord[int])(nil)

// NewBackend is the seam over sh, a backend's view; d.Check is the
// backend's Ping, as Pipeline.Check reports it.
func NewBackend[V any](d Deps[V], sh backend.Shared) Coord[V] {
	c := &backendCoord[V]{d: d, sh: sh}
	if s, ok := sh.(interface{ System() string }); ok {
		c.system = []attribute.KeyValue{telemetry.DBSystemName.String(s.System())}
	}
	return c
}

func (c *backendCoord[V]) Read(ctx context.Context, key string) (rcache.Entry[V], cache.Freshness, error) {
	return c.d.readL2(ctx, c, key)
}

func (c *backendCoord[V]) ReadMany(ctx context.Context, keys []string) ([]Look[V], error) {
	return c.d.readL2Many(ctx, c, keys)
}

func (c *backendCoord[V]) LookOrLock(ctx context.Context, key string, _ bool, w Want) (Look[V], error) {
	// The lease outlives the look's caller: the detached load holds
	// it, and releases it.
	return c.d.lookThenLock(ctx, context.WithoutCancel(ctx), c, key, w)
}

func (c *backendCoord[V]) LookOrLockMany(ctx context.Context, keys []string) ([]Look[V], error) {
	if bm, ok := c.sh.(backend.SharedMany); ok {
		return c.lookThenLockBatch(ctx, bm, keys)
	}
	return c.d.lookThenLockMany(ctx, c, keys), nil
}

// lookThenLockBatch is lookThenLockMany over a view with [backend.SharedMany]:
// one LoadMany of every key, one TryAcquireMany of those not fresh, and
// one LoadMany of those granted, since another process may have written
// them in between (a value found then gives the lease back). Each lease
// won beats from its grant, as lookThenLock's does.
func (c *backendCoord[V]) lookThenLockBatch(ctx context.Context, bm backend.SharedMany, keys []string) ([]Look[V], error) {
	looks := make([]Look[V], len(keys))
	if err := c.readMany(ctx, bm, keys, func(i int, e rcache.Entry[V], f cache.Freshness) {
		looks[i] = Look[V]{E: e, F: f}
	}); err != nil {
		return nil, err // recorded by readMany
	}
	var todo []int
	var tkeys []string
	for i, k := range keys {
		if looks[i].F != cache.Fresh {
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
	a, err := Do(ctx, c.d.Guard, func(ctx context.Context) (acquired, error) {
		leases, errs := bm.TryAcquireMany(ctx, tkeys, c.d.Lease)
		for _, err := range errs {
			if err != nil && !errors.Is(err, backend.ErrNotAcquired) {
				return acquired{leases, errs}, err // the breaker hears it
			}
		}
		return acquired{leases, errs}, nil
	})
	var won []int // indexes in keys
	var wkeys []string
	var grants []*Grant
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
			grants = append(grants, Hold(ctx, c, lease))
		case errors.Is(kerr, backend.ErrNotAcquired):
			looks[i].Err = kerr
		default:
			if lease != nil {
				c.d.Release(ctx, keys[i], lease)
			}
			c.d.lockFailed(ctx, kerr)
			looks[i].Err = kerr
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
			grants[j].End() // given back below: its beats stop
			back = append(back, grants[j].Lease)
			*lk = Look[V]{E: e, F: f}
			return
		case f == cache.Stale:
			lk.E, lk.F = e, f
		}
		lk.Lease, lk.G = grants[j].Lease, grants[j]
	})
	switch {
	case err != nil && ctx.Err() != nil:
		// The caller left: the looks end with it, and grant nothing.
		for j, i := range won {
			grants[j].End() // given back below: its beats stop
			back = append(back, grants[j].Lease)
			looks[i].Err = err
		}
	case err != nil:
		// The backend failed between the grants and now: load, and skip
		// the write-backs, which would fail too.
		for j, i := range won {
			looks[i].Lease, looks[i].G, looks[i].ReadFailed = grants[j].Lease, grants[j], err
		}
	}
	c.d.ReleaseMany(ctx, back)
	return looks, nil
}

// readMany reads keys with LoadMany, as one span and one operation of the
// breaker, and hands each key's entry to got (a per-key data problem is a
// miss). Its error is recorded.
func (c *backendCoord[V]) readMany(ctx context.Context, bm backend.SharedMany, keys []string, got func(i int, e rcache.Entry[V], f cache.Freshness)) error {
	var sp trace.Span
	if c.d.Tel.Tracing() {
		ctx, sp = c.d.Tel.Start(ctx, telemetry.SpanL2, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(c.L2Attrs("HGET", "LoadMany", attrKeys.Int(len(keys)))...))
		defer sp.End()
	}
	raws, err := Do(ctx, c.d.Guard, func(ctx context.Context) ([][]byte, error) {
		raws, err := bm.LoadMany(ctx, keys)
		if err == nil && len(raws) != len(keys) {
			err = fmt.Errorf("resilience: LoadMany returned %d answers for %d keys", len(raws), len(keys))
		}
		return raws, err
	})
	if err != nil {
		c.d.FailOpen(ctx, sp, "l2_get", err)
		return err
	}
	for i, k := range keys {
		if raws[i] == nil {
			got(i, rcache.Entry[V]{}, cache.Miss)
			continue
		}
		e, f := c.d.Store.Decode(k, raws[i])
		got(i, e, f)
	}
	return nil
}

func (c *backendCoord[V]) Commit(ctx context.Context, key string, e rcache.Entry[V], token string) (bool, error) {
	return c.d.Store.Commit(ctx, key, e, token)
}

// CommitMany writes side by side, up to eachLimit at once, as
// LookOrLockMany looks: a backend's calls of concurrent callers share its
// statements (PostgreSQL batches them), where the store's SetMany, one
// write after another, would cost a chunk of 4,096 keys 4,096 sequential
// round trips.
func (c *backendCoord[V]) CommitMany(ctx context.Context, writes []rcache.Write[V]) ([]rcache.Written, error) {
	if len(writes) <= 1 {
		return c.d.Store.SetMany(ctx, writes)
	}
	out := make([]rcache.Written, len(writes))
	errs := make([]error, len(writes))
	var g errgroup.Group
	g.SetLimit(backendEachLimit)
	for i := range writes {
		// Each goroutine writes its own write's outcome.
		g.Go(func() error {
			ws, err := c.d.Store.SetMany(ctx, writes[i:i+1])
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

func (c *backendCoord[V]) ExtendMany(ctx context.Context, leases []*backend.Lease) ([]bool, error) {
	return extendEach(ctx, leases)
}

func (c *backendCoord[V]) Release(ctx context.Context, key string, lease *backend.Lease) {
	notifyRelease(ctx, c.sh, key, lease)
}

// ReleaseMany releases the leases side by side, up to eachLimit at once.
func (c *backendCoord[V]) ReleaseMany(ctx context.Context, leases []*backend.Lease) {
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

func (c *backendCoord[V]) Mark() uint64 { return markOf(c.sh) }

func (c *backendCoord[V]) Subscribe(key string, mark uint64) (<-chan struct{}, func(), bool) {
	return subscribeSince(c.sh, key, mark)
}

func (c *backendCoord[V]) Subscribed() bool {
	s, ok := c.sh.(interface{ Subscribed() bool })
	return ok && s.Subscribed()
}

// Check is the backend's Ping (d.Check): a backend checks itself.
func (c *backendCoord[V]) Check(ctx context.Context) *Finding { return c.d.Check(ctx) }

func (c *backendCoord[V]) L2Attrs(_, backendOp string, more ...attribute.KeyValue) []attribute.KeyValue {
	as := append(append([]attribute.KeyValue(nil), c.system...), telemetry.DBOperationName.String(backendOp))
	return append(as, more...)
}

func (c *backendCoord[V]) FailReason() string { return "backend_error" }
