package resilience

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/loadcall"
	"github.com/herdguard/herdguard/internal/rcache"
)

// LoadManyFunc loads the values of keys in one call: one SQL query with
// WHERE id = ANY($1), one HTTP request for many ids. It should honour ctx.
//
// The returned map holds a value for each key that has one; a key left out
// has none, as a [LoadFunc] returning [ErrNotFound] says (and [ErrNotFound]
// as the error says it of every key). Any other error fails every key of
// the call: the loader's breaker counts it, Retry retries the whole call,
// and each key goes to the fallback chain. To fail some keys only, return
// [KeyErrors] for them (as the error, or wrapped in it) beside the values
// of the others: the call then counts as a success.
type LoadManyFunc[V any] func(ctx context.Context, keys []string) (map[string]V, error)

// spanGetMany is the span of one [Pipeline.GetMany] call. It has no child
// per key: the batch's Redis round trips, loader call and write-back each
// have one.
const spanGetMany = "resilience.get_many"

// attrKeys is the attribute of a batch's number of keys.
var attrKeys = attribute.Key("herdguard.keys")

// GetMany returns the values of keys, as [Pipeline.GetResult] would for
// each, at the cost of one batch: the in-process cache first; then, for
// its misses, Redis reads each key's value and, with Lock, tries its lock
// (scripts of up to 128 keys, several to a round trip); then ONE call of
// loadMany for every key this process won, or that Redis could not
// answer, written back the same way (write, release and announce per
// key). More than [GetManyChunk] misses go through these steps a chunk at
// a time, with a loader call per chunk. Keys
// another process holds are waited for together, in the wait loop of
// [Pipeline.Get] with its rules (woken by their announcements, a dead
// holder taken over, MaxWait, then a load without the lock); the wait
// ends with the shared load's FlightTimeout. Keys another caller
// of this process is already loading, with Get or GetMany, are joined, not
// loaded again.
//
// The map holds one Result per distinct key (duplicates are answered
// once). A key with no value has NotFound set (cached for NegativeTTL) and
// is not an error. A key whose load failed gets the fallback chain (the
// stale copy, then the default) as Get does; the keys left failing are
// listed in the returned [KeyErrors], with a zero Result in the map. When
// Redis fails, every key is loaded by this process, in one loadMany call,
// and marked FailedOpen. When ctx ends first, the keys still unanswered
// are in KeyErrors with ctx's error; the shared load goes on for others.
//
// Other errors leave the map nil: [ErrNilContext], [ErrNilLoader],
// [ErrEmptyKey] for an empty key, [ErrClosed], [ErrWrongCall].
func (p *Pipeline[V]) GetMany(ctx context.Context, keys []string, loadMany LoadManyFunc[V]) (map[string]Result[V], error) {
	switch {
	case ctx == nil:
		return nil, ErrNilContext
	case loadMany == nil:
		return nil, ErrNilLoader
	case p.keyless:
		return nil, wrongCall(p.name, "is Keyless: use Do")
	case p.closed.Load():
		return nil, ErrClosed
	}
	uniq := make([]string, 0, len(keys))
	seen := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		if k == "" {
			return nil, ErrEmptyKey
		}
		if _, dup := seen[k]; !dup {
			seen[k] = struct{}{}
			uniq = append(uniq, k)
		}
	}
	var sp trace.Span
	if p.tel.Tracing() {
		ctx, sp = p.tel.Start(ctx, spanGetMany, trace.WithAttributes(p.tel.PipelineAttr, attrKeys.Int(len(uniq))))
	}
	b := &manyCall[V]{res: make(map[string]Result[V], len(uniq)), errs: KeyErrors{}}
	var misses []string
	stale := map[string]rcache.Entry[V]{}
	for _, k := range uniq {
		var h rcache.Hit[V]
		f := cache.Miss
		if p.l1 != nil {
			h, f = p.l1.Find(k)
		}
		switch f {
		case cache.Fresh:
			if p.beta > 0 && p.refreshEarly(h) {
				p.refreshAsync(ctx, k, LoadFunc[V](loadcall.One(&p.lc, loadMany)), h.Written())
			}
			b.res[k], _ = fromHit(h) // a not-found is no error here
			continue
		case cache.Stale:
			if p.swr && !h.NotFound() {
				p.refreshAsync(ctx, k, LoadFunc[V](loadcall.One(&p.lc, loadMany)), h.Written())
				b.res[k] = Result[V]{Value: h.Value(), Source: SourceStale}
				continue
			}
			stale[k] = h.Entry()
		}
		misses = append(misses, k)
	}
	if len(misses) > 0 {
		p.missMany(ctx, b, misses, stale, loadMany)
	}
	p.finishMany(ctx, sp, b)
	if p.writes.clone != nil {
		for k, r := range b.res {
			r.Value = p.out(r.Value)
			b.res[k] = r
		}
	}
	if len(b.errs) > 0 {
		return b.res, b.errs
	}
	return b.res, nil
}

// manyCall is what one GetMany call has gathered.
type manyCall[V any] struct {
	res  map[string]Result[V]
	errs KeyErrors
}

// missMany answers the keys L1 could not: it joins the loads under way in
// this process, and runs one shared batch load for the rest (see
// joinFlightMany), then settles each key as its answer comes, until ctx
// ends. Close waits for it.
func (p *Pipeline[V]) missMany(ctx context.Context, b *manyCall[V], misses []string, stale map[string]rcache.Entry[V], load LoadManyFunc[V]) {
	// The loads run on the caller's goroutine, or are launched (see
	// joinFlightMany); Close waits for this call too.
	if !p.bg.Add() {
		b.failRest(misses, ErrClosed)
		return
	}
	defer p.bg.Done()
	// Buffered for every key: nobody ever blocks on it, even once this
	// call has left.
	answers := make(chan answer[V], len(misses))
	p.joinFlightMany(ctx, misses, load, answers)
	for range misses { // one answer per key
		select {
		case a := <-answers:
			st, hasStale := stale[a.key]
			p.settle(ctx, b, a, st, hasStale)
		case <-ctx.Done():
			b.failRest(misses, ctx.Err())
			return
		}
	}
}

// failRest answers with err each of keys not answered yet.
func (b *manyCall[V]) failRest(keys []string, err error) {
	for _, k := range keys {
		if _, ok := b.res[k]; !ok {
			b.res[k] = Result[V]{}
			b.errs[k] = err
		}
	}
}

// settle turns one key's outcome into its Result, with the fallback chain
// for a failed load, as miss does for Get.
func (p *Pipeline[V]) settle(ctx context.Context, b *manyCall[V], a answer[V], stale rcache.Entry[V], hasStale bool) {
	o, err := a.o, a.err
	if a.joined {
		o = asJoiner(o) // a copy: a joined outcome is shared
	}
	// A batch has no span per key: its fallbacks have none either.
	r, err := p.settleMiss(ctx, a.key, o, err, stale, hasStale, false)
	b.res[a.key] = r
	if err != nil && !r.NotFound {
		b.errs[a.key] = err
	}
}
