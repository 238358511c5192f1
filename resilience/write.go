package resilience

import (
	"context"
	"crypto/rand"
	"sync/atomic"
	"time"

	"github.com/herdguard/herdguard/internal/coord"
	"github.com/herdguard/herdguard/internal/gens"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/lock"
)

// writes is the pipeline's state for Set, Invalidate and the values it
// hands out.
type writes[V any] struct {
	gens gens.Table // orders L1 fills against writes
	// origin tags this pipeline's announcements, so that it skips its own.
	origin string
	// clone, if set, copies each value handed to a caller.
	clone func(V) V
	// resubscribed counts the subscription confirmations after the first:
	// each one dropped every L1 entry.
	resubscribed atomic.Int64
	// refreshes shares the loads of concurrent Refresh calls (apart from
	// the Get's flights: a Refresh loads anew).
	refreshes flightGroup[V]
}

// Set stores value as key's value now: in Redis (with Redis) under a fence
// above every lock grant and write so far, so that no load in flight,
// here or in another process, can write an older value back over it; in
// the in-process cache; and it announces the write, so that every other
// process drops its in-process copy of key. The value keeps the Cache ttl
// (jittered). Without Redis it is the in-process cache alone; a load of
// key already in flight does not overwrite it there either.
//
// A Redis failure (or its open breaker) is returned, and the local copy of
// key is dropped: the pipeline then holds no value for key that Redis may
// lack. Set returns [ErrNilContext], [ErrEmptyKey] or [ErrClosed] for bad
// calls, and [ErrWrongCall] on a pipeline without a cache.
func (p *Pipeline[V]) Set(ctx context.Context, key string, value V) error {
	if err := p.checkWrite(ctx, key, "Set"); err != nil {
		return err
	}
	if c := p.writes.clone; c != nil {
		value = c(value) // the caller may go on changing its own copy
	}
	e := p.newEntry(value, false, 0, 0)
	if p.l2 != nil {
		fence, err := coord.Do(ctx, p.redisGuard, func(ctx context.Context) (int64, error) {
			return p.l2.Write(ctx, key, e, p.writeOptions())
		})
		if err != nil {
			p.dropLocal(key)
			return err
		}
		e.Fence = fence
	}
	p.capL1(&e)
	p.writes.gens.Write(key, func() { p.l1.Set(key, e) })
	return nil
}

// Invalidate removes key's value, here and in every process, and keeps
// every load of key already in flight from writing its value back.
//
// With Redis, in one round trip, key's entry is replaced by a tombstone (a
// miss to every reader) fenced above every lock grant so far, key's lock
// is revoked (a holder still loading writes nothing when it finishes), and
// the invalidation is announced: every process drops its in-process copy
// when it hears it. A load that starts after Invalidate returns runs as
// usual and its value is stored. The tombstone lives for the longest of
// the lock lease (with Lock), the loader attempt Timeout and a second; it
// refuses loads that ran without the lock meanwhile.
//
// In this process, the in-process entry is dropped, and loads of key that
// started before Invalidate do not put their values in it. Without
// Redis, that is all. The local copy is dropped even when Redis fails;
// the failure is returned.
//
// Across processes, the guarantee rests on each process's subscription
// (one per pipeline, held whenever Redis is configured). A process that
// has it drops its copy when the announcement arrives (about a
// millisecond on one host; see docs/writes.md). A process that lost it (a
// broken link, a Redis restart) cannot hear announcements meanwhile: it
// serves its in-process copies until their L1TTL ends, and drops every
// one of them when the subscription is confirmed again. So a process
// serves a value at most L1TTL after it was invalidated, and usually for
// the announcement's transit alone; keep L1TTL as short as staleness
// during an outage may be. Announcements made between a pipeline's Build
// and its first confirmation (Health's Subscribed) are not heard either.
func (p *Pipeline[V]) Invalidate(ctx context.Context, key string) error {
	if err := p.checkWrite(ctx, key, "Invalidate"); err != nil {
		return err
	}
	var err error
	if p.l2 != nil {
		_, err = coord.Do(ctx, p.redisGuard, func(ctx context.Context) (int64, error) {
			return p.l2.Invalidate(ctx, key, p.writeOptions())
		})
	}
	p.dropLocal(key)
	return err
}

// invalidateHold is how long Invalidate's tombstone lives in Redis: the
// longest of the lock lease (with Lock), the loader attempt Timeout and a
// second. Loads without the lock (after MaxWait, or failing open), whose
// write-backs carry no fence, are refused meanwhile, so a load that read
// the old value just before Invalidate cannot store it; with Lock, a
// holder is stopped by the revoked lock whatever the hold.
func (p *Pipeline[V]) invalidateHold() time.Duration {
	d := max(p.timeout, time.Second)
	if p.locker != nil {
		d = max(d, p.lockCfg.Lease)
	}
	return d
}

func (p *Pipeline[V]) checkWrite(ctx context.Context, key, op string) error {
	switch {
	case ctx == nil:
		return ErrNilContext
	case key == "":
		return ErrEmptyKey
	case p.keyless:
		return wrongCall(p.name, "is Keyless: "+op+" needs a key")
	case p.l1 == nil:
		return wrongCall(p.name, "has no cache: "+op+" needs Cache(ttl)")
	case p.closed.Load():
		return ErrClosed
	}
	return nil
}

func (p *Pipeline[V]) writeOptions() rcache.WriteOptions {
	return rcache.WriteOptions{Origin: p.writes.origin, FenceRetention: lock.DefaultFenceRetention, Hold: p.invalidateHold()}
}

// dropLocal removes key from L1 and keeps loads that began before from
// putting it back.
func (p *Pipeline[V]) dropLocal(key string) {
	if p.l1 == nil {
		return
	}
	p.writes.gens.Write(key, func() { p.l1.Delete(key) })
}

// dropAllLocal empties L1 and keeps loads that began before from filling
// it.
func (p *Pipeline[V]) dropAllLocal() {
	if p.l1 == nil {
		return
	}
	p.writes.gens.WriteAll(p.l1.Clear)
}

// newOrigin returns a random origin, to tag a pipeline's announcements.
func newOrigin() string {
	var b [rkey.OriginLen]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return string(b[:])
}
