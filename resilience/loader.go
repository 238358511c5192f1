package resilience

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/herdguard/herdguard/backend"
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
	var fence int64
	if g != nil {
		fence = g.Lease.Fence()
		if !o.res.FailedOpen {
			lctx = loadcall.WithFence(lctx, key, fence) // for Fence
		}
	}
	v, took, err := loadcall.Call(lctx, &p.lc, key, loadcall.Func[V]{Load: load})
	e, store, err := p.loaded(o, v, errors.Is(err, ErrNotFound), err, took, fence, ttl.Get())
	if store {
		p.store(ctx, key, e, g, o)
	}
	return err
}

// loadBatch calls the loader once for items and stores what it returns:
// under a lease, with one fenced commit per key (write while the lease
// holds, release, announce), all in one round trip; without one, a plain
// write; failed open, in L1 only.
func (p *Pipeline[V]) loadBatch(ctx context.Context, items []*loadItem, load LoadManyFunc[V], outs map[string]*keyOut[V]) {
	if len(items) == 0 {
		return
	}
	// fences are those of the keys under a lease, for Fence.
	keys, fences := make([]string, len(items)), map[string]int64(nil)
	for i, it := range items {
		keys[i] = it.key
		if it.lease != nil && it.failOpen == nil {
			if fences == nil {
				fences = make(map[string]int64)
			}
			fences[it.key] = it.lease.Fence()
		}
	}
	p.countBatch(ctx, items)
	stop := p.holdMany(ctx, items)
	vals, keyErrs, took, err := loadcall.CallMany(loadcall.WithFences(ctx, fences), &p.lc, keys, load)
	stop()
	allNotFound := errors.Is(err, ErrNotFound)
	if allNotFound {
		err = nil
	}
	var release []*backend.Lease
	var writes []rcache.Write[V]
	var written []*loadItem
	for _, it := range items {
		out := outs[it.key]
		out.set = true
		if it.failOpen != nil {
			out.o.failOpen(it.failOpen)
		}
		var fence int64
		if it.lease != nil {
			fence = it.lease.Fence()
		}
		kerr := cmp.Or(err, keyErrs[it.key])
		v, ok := vals[it.key]
		e, store, kerr := p.loaded(out.o, v, kerr == nil && (!ok || allNotFound), kerr, took, fence, 0)
		out.err = kerr
		switch {
		case !store:
			release = appendLease(release, it.lease)
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
		default:
			p.fillL1(it.key, e, out.o)
			release = appendLease(release, it.lease)
		}
	}
	release = append(release, p.storeMany(ctx, writes, written, outs)...)
	p.releaseMany(ctx, release)
}

// loaded sets o's result from a loader's answer for one key: v, or a
// not-found (notFound), or err, an error that is not one. It returns the
// error the call gets and, when the answer is to be stored (a value, or a
// not-found with NegativeTTL), its entry: under a grant of fence (0:
// unlocked), with the TTL the loader set (set; 0: none).
func (p *Pipeline[V]) loaded(o *outcome[V], v V, notFound bool, err error, took time.Duration, fence int64, set time.Duration) (e rcache.Entry[V], store bool, _ error) {
	switch {
	case notFound && p.negTTL <= 0:
		o.res = Result[V]{Source: SourceLoader, NotFound: true, FailedOpen: o.res.FailedOpen, FailOpenCause: o.res.FailOpenCause}
		return e, false, cmp.Or(err, ErrNotFound)
	case err != nil && !notFound:
		return e, false, err
	}
	e = loadcall.Stamp(p.lifetimes(), v, notFound, took, fence, set)
	o.res.Source = SourceLoader
	if notFound {
		o.res.NotFound = true
		return e, true, ErrNotFound
	}
	o.res.Value = v
	return e, true, nil
}

// newEntry stamps a loaded value with its times.
func (p *Pipeline[V]) newEntry(v V, notFound bool, took time.Duration, fence int64) rcache.Entry[V] {
	return loadcall.Stamp(p.lifetimes(), v, notFound, took, fence, 0)
}

// lifetimes are how long the pipeline keeps a loaded entry.
func (p *Pipeline[V]) lifetimes() loadcall.Lifetimes {
	return loadcall.Lifetimes{TTL: p.ttl, Grace: p.grace, NegativeTTL: p.negTTL, Jitter: p.jitter}
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
