package resilience

import (
	"context"
	"errors"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/coord"
	"github.com/herdguard/herdguard/internal/loadcall"
	"github.com/herdguard/herdguard/internal/rcache"
)

// loadAndStore calls the loader and stores what it returns (a value, or a
// not-found when negative caching is on) in L2 and L1, under g's lease
// (nil: unlocked).
func (p *Pipeline[V]) loadAndStore(ctx context.Context, key string, load LoadFunc[V], g *coord.Grant, o *outcome[V]) error {
	p.countLoad(ctx, g, o.res.FailedOpen)
	lctx, ttl := loadcall.WithTTL(ctx) // for SetTTL
	if g != nil && !o.res.FailedOpen {
		lctx = loadcall.WithFence(lctx, key, g.Lease.Fence()) // for Fence
	}
	v, took, err := loadcall.Call(lctx, &p.lc, key, loadcall.Func[V]{Load: load})
	notFound := errors.Is(err, ErrNotFound)
	if err != nil && !(notFound && p.negTTL > 0) {
		if notFound {
			o.res = Result[V]{Source: SourceLoader, NotFound: true, FailedOpen: o.res.FailedOpen}
		}
		return err
	}
	var fence int64
	if g != nil {
		fence = g.Lease.Fence()
	}
	e := p.newEntry(v, notFound, took, fence)
	p.applyLoaderTTL(&e, ttl)
	p.store(ctx, key, e, g, o)
	o.res.Source = SourceLoader
	if notFound {
		o.res.NotFound = true
		return ErrNotFound
	}
	o.res.Value = v
	return nil
}

// loadBatch calls the loader once for items and stores what it returns:
// under a lease, with one fenced commit per key (write while the lease
// holds, release, announce), all in one round trip; without one, a plain
// write; failed open, in L1 only.
func (p *Pipeline[V]) loadBatch(ctx context.Context, items []*loadItem, load LoadManyFunc[V], outs map[string]*keyOut[V]) {
	if len(items) == 0 {
		return
	}
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = it.key
	}
	p.countBatch(ctx, items)
	stop := p.holdMany(ctx, items)
	vals, keyErrs, took, err := loadcall.CallMany(loadcall.WithFences(ctx, leaseFences(items)), &p.lc, keys, load)
	stop()
	allNotFound := errors.Is(err, ErrNotFound)
	if allNotFound {
		err = nil
	}
	var release []*backend.Lease
	var writes []rcache.Write[V]
	var written []*loadItem
	entries := make(map[string]rcache.Entry[V], len(items))
	for _, it := range items {
		out := outs[it.key]
		out.set = true
		if it.failOpen != nil {
			out.o.failOpen(it.failOpen)
		}
		kerr := keyErrs[it.key]
		if err != nil || kerr != nil {
			out.err = err
			if err == nil {
				out.err = kerr
			}
			if it.lease != nil {
				release = append(release, it.lease)
			}
			continue
		}
		v, ok := vals[it.key]
		notFound := !ok || allNotFound
		if notFound && p.negTTL <= 0 {
			out.o.res = Result[V]{Source: SourceLoader, NotFound: true, FailedOpen: out.o.res.FailedOpen, FailOpenCause: out.o.res.FailOpenCause}
			out.err = ErrNotFound
			if it.lease != nil {
				release = append(release, it.lease)
			}
			continue
		}
		var fence int64
		if it.lease != nil {
			fence = it.lease.Fence()
		}
		e := p.newEntry(v, notFound, took, fence)
		out.o.res.Source = SourceLoader
		if notFound {
			out.o.res.NotFound = true
			out.err = ErrNotFound
		} else {
			out.o.res.Value = v
		}
		switch {
		case it.lease != nil && it.lost.Load():
			p.tel.LeaseLost(ctx, nil)
			release = append(release, it.lease)
		case p.l2 != nil && !out.o.res.FailedOpen:
			w := rcache.Write[V]{Key: it.key, Entry: e}
			if it.lease != nil {
				w.Token, w.Release = it.lease.Token(), true
			}
			writes = append(writes, w)
			written = append(written, it)
			entries[it.key] = e
		default:
			p.fillL1(it.key, e, out.o)
			if it.lease != nil {
				release = append(release, it.lease)
			}
		}
	}
	release = append(release, p.storeMany(ctx, writes, written, outs)...)
	p.releaseMany(ctx, release)
}

// leaseFences are the fences of items' keys under a lease, for Fence;
// nil if none is.
func leaseFences(items []*loadItem) map[string]int64 {
	var many map[string]int64
	for _, it := range items {
		if it.lease != nil && it.failOpen == nil {
			if many == nil {
				many = make(map[string]int64)
			}
			many[it.key] = it.lease.Fence()
		}
	}
	return many
}

// newEntry stamps a loaded value with its times.
func (p *Pipeline[V]) newEntry(v V, notFound bool, took time.Duration, fence int64) rcache.Entry[V] {
	now := time.Now()
	ttl, grace := p.ttl, p.grace
	if notFound {
		ttl, grace = p.negTTL, 0
	}
	ttl = cache.Jitter(ttl, p.jitter)
	return rcache.Entry[V]{
		Value: v, NotFound: notFound,
		Written: now, Expires: now.Add(ttl), StaleUntil: now.Add(ttl + grace),
		LoadDuration: took, Fence: fence,
	}
}

// MinLoaderTTL is the shortest TTL a loader can give its value with
// [SetTTL].
const MinLoaderTTL = time.Second

// SetTTL, called by a [LoadFunc] with the context the pipeline gave it,
// sets the TTL of the value it is about to return: from a Cache-Control
// max-age, or a row's expiry. The TTL is clamped to [MinLoaderTTL, the
// Cache ttl]; jitter and the Stale grace apply to it as to the Cache ttl,
// and L1 keeps it no longer than L1TTL. It has no effect on a not-found,
// which keeps NegativeTTL. SetTTL reports false, doing nothing, when ctx
// does not come from a pipeline's load.
func SetTTL(ctx context.Context, d time.Duration) bool {
	return loadcall.SetTTL(ctx, max(d, MinLoaderTTL))
}

// applyLoaderTTL re-times e with the TTL its loader set, if any.
func (p *Pipeline[V]) applyLoaderTTL(e *rcache.Entry[V], h *loadcall.TTL) {
	d := h.Get()
	if d == 0 || e.NotFound {
		return
	}
	ttl := cache.Jitter(min(d, p.ttl), p.jitter)
	e.Expires = e.Written.Add(ttl)
	e.StaleUntil = e.Expires.Add(p.grace)
}
