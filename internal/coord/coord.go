// Package coord is the pipeline's coordination seam: what the stages of
// package resilience ask of the service that the processes of a pipeline
// share, whichever it is, with its three adapters (Redis, any
// [backend.Shared], and the embedded default of one process), the wiring
// that builds the Redis and backend adapters and what they sit on
// ([WireRedis], [WireBackend]), the probes of Pipeline.Check, the guard
// around the service's operations, and the watchdog that keeps a lease
// alive while its holder loads.
package coord

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/obs"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/lock"
)

// Coord is the coordination seam. Its adapters are NewRedis's (redis.go:
// Redis, its scripts and its batched round trips), NewBackend's
// (backend.go: any [backend.Shared]) and NewMemory's (memory.go: the
// embedded default, one process). The stages never ask which one they
// run on.
//
// A pipeline has one when it has L2 or a lock; without either, it has
// none and the stages that would use it do not run.
type Coord[V any] interface {
	// Read reads key's stored value, without the lock: what waiters look
	// at. A per-key data problem is a miss; an error (recorded) means the
	// call goes on without the service. Over L2 (Redis, a backend) it is
	// one read through the guard, with a client span, a per-key data
	// problem counted as a corrupt entry and an error recorded as failing
	// open (read.go); the embedded default reads L1.
	Read(ctx context.Context, key string) (rcache.Entry[V], cache.Freshness, error)
	// ReadMany is Read for distinct keys, in one step: the i-th look is
	// keys[i]'s value, a look that tries no lock (a miss when its data is
	// unusable, counted as a corrupt entry). Its error is the read's
	// failure as a whole, recorded as failing open.
	ReadMany(ctx context.Context, keys []string) ([]Look[V], error)
	// LookOrLock reads key's stored value and, unless w takes it (fresh,
	// and for a refresh newer than the copy that called for it), tries
	// key's lock, in one step. A look that found such a value has no
	// lease; one that won the lock has it, with the stale copy, if any. It
	// returns backend.ErrNotAcquired (with the stale copy) while a live
	// holder has the lock, and records its failures (on a span, in the
	// metrics) itself. likely says that the value most likely landed (an
	// announcement, or L1's word): an adapter whose plain read is cheaper
	// than its look reads first.
	LookOrLock(ctx context.Context, key string, likely bool, w Want) (Look[V], error)
	// LookOrLockMany is LookOrLock for distinct keys, in as few round
	// trips as the adapter can: the i-th look is keys[i]'s, with its own
	// error, recorded as LookOrLock records it. Its error is the look's
	// failure as a whole, which grants nothing. A look's lease may
	// already beat (Look.G).
	LookOrLockMany(ctx context.Context, keys []string) ([]Look[V], error)
	// Commit is the holder's last step: write e while token holds key's
	// lock, release it, and announce the value, in one step. stored is
	// false when a newer fence wrote key.
	Commit(ctx context.Context, key string, e rcache.Entry[V], token string) (stored bool, err error)
	// CommitMany writes many entries, each with Commit's rules when it
	// carries a token (a plain write when not), in one step.
	CommitMany(ctx context.Context, writes []rcache.Write[V]) ([]rcache.Written, error)
	// ExtendMany extends leases, the watchdog's beat (of one lease, or a
	// batch's); lost[i] says leases[i] was found gone.
	ExtendMany(ctx context.Context, leases []*backend.Lease) (lost []bool, err error)
	// Release gives lease back and wakes key's waiters.
	Release(ctx context.Context, key string, lease *backend.Lease)
	// ReleaseMany is Release for many leases, in as few round trips as
	// the adapter can.
	ReleaseMany(ctx context.Context, leases []*backend.Lease)
	// Mark is the announcements' mark now (0 without marks), and
	// Subscribe subscribes to key's announcements since mark: see
	// resilience's Pipeline.subscribe.
	Mark() uint64
	Subscribe(key string, mark uint64) (woken <-chan struct{}, unsubscribe func(), lookNow bool)
	// Subscribed reports whether the announcements are heard now, for
	// Health.
	Subscribed() bool
	// Check is Pipeline.Check for this service: what it found wrong, or
	// nil.
	Check(ctx context.Context) *Finding
	// L2Attrs is the attributes of an L2 client span: the service's
	// db.system.name and the operation, Redis's command or a backend's
	// method.
	L2Attrs(redisOp, backendOp string, more ...attribute.KeyValue) []attribute.KeyValue
	// FailReason names a failure of the service in fail-open metrics.
	FailReason() string
}

// Deps is what an adapter needs of the pipeline it serves, given when the
// adapter is built: the pipeline's telemetry, guard, store, lock and
// lease, and the steps of its stages that an adapter's looks take.
// [WireRedis] and [WireBackend] fill in the guard, the store, the lock
// and Check, which they build.
type Deps[V any] struct {
	Tel   *obs.Telemetry
	Guard *Guard   // Redis's or the backend's breaker and timeout; nil without either
	Store Store[V] // L2; nil for the embedded default
	// Locker is the lock, and Lease its leases' time to live; nil and 0
	// without Lock.
	Locker lock.Locker
	Lease  time.Duration
	// Release and ReleaseMany give leases back, on a goroutine of their
	// own: the pipeline's background work, which Close waits for.
	Release     func(ctx context.Context, key string, lease *backend.Lease)
	ReleaseMany func(ctx context.Context, leases []*backend.Lease)
	// FailOpen records that a call went on without the service. (A
	// per-key data problem in L2, a miss, is Tel.CorruptEntry.)
	FailOpen func(ctx context.Context, sp trace.Span, op string, err error)
	// Check is Pipeline.Check for the service (check.go: the ACL probes,
	// or the backend's Ping); nil for the embedded default, which has
	// nothing to check.
	Check func(ctx context.Context) *Finding
	// Panicked is what a panic recovered on a goroutine of a look goes on
	// as, panicked again in the caller's goroutine.
	Panicked func(v any) any
}

// Store is the part of the shared cache (L2) an adapter reads, writes to
// and decodes with.
type Store[V any] interface {
	Get(ctx context.Context, key string) (rcache.Entry[V], cache.Freshness, error)
	GetMany(ctx context.Context, keys []string) ([]rcache.Got[V], error)
	Decode(key string, raw []byte) (rcache.Entry[V], cache.Freshness)
	// Commit writes under the lock's token, releases the lock and wakes
	// its waiters, in one step.
	Commit(ctx context.Context, key string, e rcache.Entry[V], token string) (bool, error)
	SetMany(ctx context.Context, writes []rcache.Write[V]) ([]rcache.Written, error)
}

// attrKeys is the attribute of a batch's number of keys.
const attrKeys = attribute.Key("herdguard.keys")

// Want is what a look takes for an answer: a fresh entry, and for a
// Refresh one written clearly after After. It goes to the seam by
// value: an outcome handed to an interface's method would move every
// miss's outcome to the heap.
type Want struct {
	Refresh bool
	After   time.Time
}

// Takes reports whether an entry written at written, found with
// freshness f, answers the look.
func (w Want) Takes(written *time.Time, f cache.Freshness) bool {
	return f == cache.Fresh && (!w.Refresh || written.Sub(w.After) > writtenSlack)
}

// writtenSlack is how much later than a refresh's entry another entry must
// have been written to count as newer.
const writtenSlack = time.Millisecond

// Look is one look at a key through the lock: the value, and the lease
// when the lock was granted.
type Look[V any] struct {
	E     rcache.Entry[V]
	F     cache.Freshness
	Lease *backend.Lease
	// ReadFailed is the failure of the read that followed the grant (an
	// adapter that reads and locks in two steps): the holder loads under
	// the lease, and its write-back is skipped, failing open.
	ReadFailed error
	// G is the lease's grant when its watchdog already beats.
	G *Grant
	// Err is this key's look error, in LookOrLockMany's looks.
	Err error
}

// tryAcquire tries key's lock, through the guard.
func (d *Deps[V]) tryAcquire(ctx context.Context, key string) (*backend.Lease, error) {
	return Do(ctx, d.Guard, func(ctx context.Context) (*backend.Lease, error) {
		return d.Locker.TryAcquire(ctx, key, d.Lease)
	})
}

// lookThenLock is LookOrLock for an adapter (co) whose read and lock are
// two steps: the read (co's Read), then, unless the value is fresh, the lock,
// then (won) a second read, since another process may have written the
// value in between; a value found then gives the lease back.
//
// The lease beats from its grant, on beat (the watchdog's context): the
// second read may wait behind a burst's other reads for longer than the
// lease's beat, and a lease that does not beat meanwhile looks dead to
// other processes, which would take it over and load the key again.
func (d *Deps[V]) lookThenLock(ctx, beat context.Context, co Coord[V], key string, w Want) (Look[V], error) {
	e, f, err := co.Read(ctx, key)
	if err != nil {
		return Look[V]{}, err // recorded by Read
	}
	if w.Takes(&e.Written, f) {
		return Look[V]{E: e, F: f}, nil
	}
	lk := Look[V]{E: e, F: f}
	lease, err := d.tryAcquire(ctx, key)
	switch {
	case errors.Is(err, backend.ErrNotAcquired):
		return lk, err
	case err != nil:
		d.lockFailed(ctx, err)
		return lk, err
	}
	g := Hold(beat, co, lease)
	e2, f2, err := co.Read(ctx, key)
	switch {
	case err != nil && ctx.Err() != nil:
		// The caller left: the look ends with it, and grants nothing.
		g.End()
		d.Release(ctx, key, lease)
		return lk, err
	case err != nil:
		// The backend failed between the grant and now: load, and skip
		// the write-back, which would fail too.
		lk.Lease, lk.G, lk.ReadFailed = lease, g, err
		return lk, nil
	case w.Takes(&e2.Written, f2):
		g.End()
		d.Release(ctx, key, lease)
		return Look[V]{E: e2, F: f2}, nil
	case f2 == cache.Stale:
		lk.E, lk.F = e2, f2
	}
	lk.Lease, lk.G = lease, g
	return lk, nil
}

// lockFailed records a try of a lock that failed with err (not
// backend.ErrNotAcquired) while its caller stays: a problem with the
// key's data as a corrupt entry, a miss; any other failure as failing
// open.
func (d *Deps[V]) lockFailed(ctx context.Context, err error) {
	switch {
	case ctx.Err() != nil:
	case Classify(ctx, err) == Data:
		d.Tel.CorruptEntry(ctx, nil)
	default:
		d.FailOpen(ctx, nil, "lock_acquire", err)
	}
}

// lookThenLockMany is LookOrLockMany with lookThenLock, up to eachLimit
// keys at once: a backend's calls of concurrent callers share its
// statements (PostgreSQL batches them), where one key after another would
// cost a chunk thousands of sequential round trips. Each lease won beats
// from its grant (see lookThenLock) until the batch's watchdog takes over
// and stops it (resilience's holdMany) or ctx ends.
func (d *Deps[V]) lookThenLockMany(ctx context.Context, co Coord[V], keys []string) []Look[V] {
	looks := make([]Look[V], len(keys))
	panics := make([]any, len(keys))
	var g errgroup.Group
	g.SetLimit(eachLimit)
	for i, k := range keys {
		// Each goroutine writes its own key's look, or its panic (a
		// backend's), which goes on in the caller's goroutine: a panic
		// on a goroutine of its own would end the process.
		g.Go(func() error {
			defer func() {
				if v := recover(); v != nil {
					panics[i] = d.Panicked(v)
				}
			}()
			lk, err := d.lookThenLock(ctx, ctx, co, k, Want{})
			lk.Err = err
			looks[i] = lk
			return nil
		})
	}
	_ = g.Wait()
	for i, pe := range panics {
		if pe != nil {
			d.ReleaseMany(ctx, leasesOf(looks))
			panic(panics[i])
		}
	}
	return looks
}

// leasesOf is the leases the looks won.
func leasesOf[V any](looks []Look[V]) []*backend.Lease {
	var ls []*backend.Lease
	for _, lk := range looks {
		if lk.Lease != nil {
			ls = append(ls, lk.Lease)
		}
	}
	return ls
}

// eachLimit bounds the keys lookThenLockMany looks at at once.
const eachLimit = 64

// notifyRelease is Release for an adapter whose lock does not announce
// its release: the release, then the wake-up.
func notifyRelease(ctx context.Context, n lock.Notifier, key string, lease *backend.Lease) {
	_ = lease.Release(ctx)
	_ = n.Notify(ctx, key)
}

// extendEach is ExtendMany one lease after another.
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
