package resilience

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"golang.org/x/sync/errgroup"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/lock"
)

// coord is the coordination seam: what the stages ask of the service that
// the processes of a pipeline share, whichever it is. Its adapters are
// redisCoord (coord_redis.go: Redis, its scripts and its batched round
// trips), backendCoord (coord_backend.go: any [backend.Shared]) and memoryCoord
// (coord_memory.go: the embedded default, one process). The stages never
// ask which one they run on.
//
// A pipeline has one when it has L2 or a lock; without either, p.co is nil
// and the stages that would use it do not run.
type coord[V any] interface {
	// read reads key's stored value, without the lock: what waiters look
	// at. A per-key data problem is a miss; an error (recorded) means the
	// call goes on without the service.
	read(ctx context.Context, key string) (rcache.Entry[V], cache.Freshness, error)
	// lookOrLock reads key's stored value and, unless w takes it (fresh,
	// and for a refresh newer than the copy that called for it), tries
	// key's lock, in one step. A look that found such a value has no
	// lease; one that won the lock has it, with the stale copy, if any. It
	// returns backend.ErrNotAcquired (with the stale copy) while a live
	// holder has the lock, and records its failures (on a span, in the
	// metrics) itself. likely says that the value most likely landed (an
	// announcement, or L1's word): an adapter whose plain read is cheaper
	// than its look reads first.
	lookOrLock(ctx context.Context, key string, likely bool, w want) (look[V], error)
	// lookOrLockMany is lookOrLock for distinct keys, in as few round
	// trips as the adapter can: the i-th look is keys[i]'s, with its own
	// error. Its error is the look's failure as a whole, which grants
	// nothing. A look's lease may already beat (look.g).
	lookOrLockMany(ctx context.Context, keys []string) ([]look[V], error)
	// commit is the holder's last step: write e while token holds key's
	// lock, release it, and announce the value, in one step. stored is
	// false when a newer fence wrote key.
	commit(ctx context.Context, key string, e rcache.Entry[V], token string) (stored bool, err error)
	// commitMany writes many entries, each with commit's rules when it
	// carries a token (a plain write when not), in one step.
	commitMany(ctx context.Context, writes []rcache.Write[V]) ([]rcache.Written, error)
	// extendMany extends leases, the watchdog's beat (of one lease, or a
	// batch's); lost[i] says leases[i] was found gone.
	extendMany(ctx context.Context, leases []*backend.Lease) (lost []bool, err error)
	// release gives lease back and wakes key's waiters.
	release(ctx context.Context, key string, lease *backend.Lease)
	// releaseMany is release for many leases, in as few round trips as
	// the adapter can.
	releaseMany(ctx context.Context, leases []*backend.Lease)
	// mark is the announcements' mark now (0 without marks), and
	// subscribe subscribes to key's announcements since mark: see
	// Pipeline.subscribe.
	mark() uint64
	subscribe(key string, mark uint64) (woken <-chan struct{}, unsubscribe func(), lookNow bool)
	// subscribed reports whether the announcements are heard now, for
	// Health.
	subscribed() bool
	// check is Pipeline.Check for this service.
	check(ctx context.Context) error
	// l2Attrs is the attributes of an L2 client span: the service's
	// db.system.name and the operation, Redis's command or a backend's
	// method.
	l2Attrs(redisOp, backendOp string, more ...attribute.KeyValue) []attribute.KeyValue
	// failReason names a failure of the service in fail-open metrics.
	failReason() string
}

// want is what a look takes for an answer: a fresh entry, and for a
// refresh (see outcome.accepts) one written clearly after after. It goes
// to the seam by value: an outcome handed to an interface's method would
// move every miss's outcome to the heap.
type want struct {
	refresh bool
	after   time.Time
}

// takes reports whether an entry written at written, found with
// freshness f, answers the look.
func (w want) takes(written *time.Time, f cache.Freshness) bool {
	return f == cache.Fresh && (!w.refresh || written.Sub(w.after) > writtenSlack)
}

// look is one look at a key through the lock: the value, and the lease
// when the lock was granted.
type look[V any] struct {
	e     rcache.Entry[V]
	f     cache.Freshness
	lease *backend.Lease
	// readFailed is the failure of the read that followed the grant (an
	// adapter that reads and locks in two steps): the holder loads under
	// the lease, and its write-back is skipped, failing open.
	readFailed error
	// g is the lease's grant when its watchdog already beats.
	g *grant
	// err is this key's look error, in lookOrLockMany's looks.
	err error
}

// lookThenLock is lookOrLock for an adapter whose read and lock are two
// steps: the read (read), then, unless the value is fresh, the lock, then
// (won) a second read, since another process may have written the value
// in between; a value found then gives the lease back.
//
// The lease beats from its grant, on beat (the watchdog's context): the
// second read may wait behind a burst's other reads for longer than the
// lease's beat, and a lease that does not beat meanwhile looks dead to
// other processes, which would take it over and load the key again.
func (p *Pipeline[V]) lookThenLock(ctx, beat context.Context, key string, w want, read func(context.Context, string) (rcache.Entry[V], cache.Freshness, error)) (look[V], error) {
	e, f, err := read(ctx, key)
	if err != nil {
		return look[V]{}, err // recorded by read
	}
	if w.takes(&e.Written, f) {
		return look[V]{e: e, f: f}, nil
	}
	lk := look[V]{e: e, f: f}
	lease, err := p.tryAcquire(ctx, key)
	switch {
	case errors.Is(err, backend.ErrNotAcquired):
		return lk, err
	case err != nil:
		if ctx.Err() == nil {
			p.failOpen(ctx, nil, "lock_acquire", err)
		}
		return lk, err
	}
	g := p.hold(beat, lease)
	e2, f2, err := read(ctx, key)
	switch {
	case err != nil && ctx.Err() != nil:
		// The caller left: the look ends with it, and grants nothing.
		g.end()
		p.release(ctx, key, lease)
		return lk, err
	case err != nil:
		// The backend failed between the grant and now: load, and skip
		// the write-back, which would fail too.
		lk.lease, lk.g, lk.readFailed = lease, g, err
		return lk, nil
	case w.takes(&e2.Written, f2):
		g.end()
		p.release(ctx, key, lease)
		return look[V]{e: e2, f: f2}, nil
	case f2 == cache.Stale:
		lk.e, lk.f = e2, f2
	}
	lk.lease, lk.g = lease, g
	return lk, nil
}

// lookThenLockMany is lookOrLockMany with lookThenLock, up to eachLimit
// keys at once: a backend's calls of concurrent callers share its
// statements (PostgreSQL batches them), where one key after another would
// cost a chunk thousands of sequential round trips. Each lease won beats
// from its grant (see lookThenLock) until the batch's watchdog takes over
// and stops it (holdMany) or ctx ends.
func (p *Pipeline[V]) lookThenLockMany(ctx context.Context, keys []string, read func(context.Context, string) (rcache.Entry[V], cache.Freshness, error)) []look[V] {
	looks := make([]look[V], len(keys))
	panics := make([]*PanicError, len(keys))
	var g errgroup.Group
	g.SetLimit(eachLimit)
	for i, k := range keys {
		// Each goroutine writes its own key's look, or its panic (a
		// backend's), which goes on in the caller's goroutine: a panic
		// on a goroutine of its own would end the process.
		g.Go(func() error {
			defer func() {
				if v := recover(); v != nil {
					panics[i] = panicked("pipeline", v)
				}
			}()
			lk, err := p.lookThenLock(ctx, ctx, k, want{}, read)
			lk.err = err
			looks[i] = lk
			return nil
		})
	}
	_ = g.Wait()
	for i, pe := range panics {
		if pe != nil {
			p.releaseMany(ctx, leasesOf(looks))
			panic(panics[i])
		}
	}
	return looks
}

// leasesOf is the leases the looks won.
func leasesOf[V any](looks []look[V]) []*backend.Lease {
	var ls []*backend.Lease
	for _, lk := range looks {
		if lk.lease != nil {
			ls = append(ls, lk.lease)
		}
	}
	return ls
}

// eachLimit bounds the keys lookThenLockMany looks at at once.
const eachLimit = 64

// release gives the lease back and wakes the waiters, on a goroutine of
// its own (Close waits for it), so that the callers of the load need not
// wait for it. It never goes through the Redis breaker and runs past the
// flight's end on a deadline of its own: a lock left behind would hold
// every other process until a waiter sees its holder dead.
func (p *Pipeline[V]) release(ctx context.Context, key string, lease *backend.Lease) {
	p.background(ctx, func(rctx context.Context) { p.co.release(rctx, key, lease) })
}

// releaseMany is release for many leases, in as few round trips as the
// coordinator can.
func (p *Pipeline[V]) releaseMany(ctx context.Context, leases []*backend.Lease) {
	if len(leases) == 0 {
		return
	}
	p.background(ctx, func(rctx context.Context) { p.co.releaseMany(rctx, leases) })
}

// background runs fn on a goroutine of its own (Close waits for it), on
// ctx's values without its cancellation, under releaseTimeout; when the
// pipeline is closing, at once.
func (p *Pipeline[V]) background(ctx context.Context, fn func(context.Context)) {
	p.launch(ctx, launching{timeout: releaseTimeout, anyway: true}, fn)
}

// notifyRelease is release for an adapter whose lock does not announce
// its release: the release, then the wake-up.
func notifyRelease(ctx context.Context, n lock.Notifier, key string, lease *backend.Lease) {
	_ = lease.Release(ctx)
	_ = n.Notify(ctx, key)
}

// extendEach is extendMany one lease after another.
func extendEach(ctx context.Context, leases []*backend.Lease) ([]bool, error) {
	lost := make([]bool, len(leases))
	var errs []error
	for i, l := range leases {
		if err := l.Extend(ctx, l.TTL()); err != nil {
			if errors.Is(err, backend.ErrNotHeld) {
				lost[i] = true
				continue
			}
			errs = append(errs, err)
		}
	}
	return lost, errors.Join(errs...)
}

// markNotifier is a notifier with marks (both of internal/rlock's are): the
// leader takes a mark before its look, and subscribes only when it must
// wait, losing no announcement made in between.
type markNotifier interface {
	lock.Notifier
	Mark() uint64
	SubscribeSince(key string, mark uint64) (<-chan struct{}, func())
}

// subscribeSince subscribes to key's announcements on n since mark when n
// keeps marks; lookNow says it does not: look once before waiting.
func subscribeSince(n lock.Notifier, key string, mark uint64) (woken <-chan struct{}, unsubscribe func(), lookNow bool) {
	if mn, ok := n.(markNotifier); ok {
		woken, unsubscribe = mn.SubscribeSince(key, mark)
		return woken, unsubscribe, false
	}
	woken, unsubscribe = n.Subscribe(key)
	return woken, unsubscribe, true
}

// markOf is n's mark now, 0 when it keeps none.
func markOf(n lock.Notifier) uint64 {
	if mn, ok := n.(markNotifier); ok {
		return mn.Mark()
	}
	return 0
}
