package resilience

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/backend/backendtest"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/telemetry"
)

// refusing is a backend over m whose views report, on refused, each key
// whose lock they found held.
type refusing struct {
	m       *backendtest.Memory
	refused chan string
}

func (r refusing) Open(s backend.Scope) (backend.Shared, error) {
	sh, err := r.m.Open(s)
	if err != nil {
		return nil, err
	}
	return refusingView{Shared: sh, refused: r.refused}, nil
}

// refusingView is a view of refusing. It has no batch forms, so a
// batch's look tries each key's lock through TryAcquire.
type refusingView struct {
	backend.Shared
	refused chan string
}

func (v refusingView) TryAcquire(ctx context.Context, key string, lease time.Duration) (*backend.Lease, error) {
	l, err := v.Shared.TryAcquire(ctx, key, lease)
	if errors.Is(err, backend.ErrNotAcquired) {
		select {
		case v.refused <- key:
		default: // a later poll's refusal: the test heard the first
		}
	}
	return l, err
}

// A batch's keys that another process holds are served as waited for,
// each recorded with the lock outcome waited; a key the first look found
// fresh is served from L2 and records no lock outcome.
func TestGetMany_looksAfterAWake(t *testing.T) {
	ctx := context.Background()
	var mem backendtest.Memory
	m := newTelMeter(t)
	lk := LockSettings{MaxWait: time.Minute, Poll: 20 * time.Millisecond}
	holder := build(t, New[string]("looks").Cache(time.Minute).Lock(lk).Backend(&mem))
	refused := make(chan string, 16)
	waiter := build(t, New[string]("looks").Cache(time.Minute).Lock(lk).
		Backend(refusing{m: &mem, refused: refused}).MeterProvider(m.mp))
	if err := holder.Set(ctx, "c", "v:c"); err != nil {
		t.Fatal(err)
	}
	hl := &batchLoader{gate: make(chan struct{}), started: make(chan struct{})}
	held := make(chan error, 1)
	go func() {
		_, err := holder.GetMany(ctx, []string{"a", "b"}, hl.load)
		held <- err
	}()
	<-hl.started // the holder holds a's and b's locks
	type got struct {
		rs  map[string]Result[string]
		err error
	}
	done := make(chan got, 1)
	wl := &batchLoader{}
	go func() {
		rs, err := waiter.GetMany(ctx, []string{"a", "b", "c"}, wl.load)
		done <- got{rs, err}
	}()
	// The waiter's first look found both held: let the holder finish.
	for seen := map[string]bool{}; !seen["a"] || !seen["b"]; {
		seen[<-refused] = true
	}
	close(hl.gate)
	g := <-done
	if g.err != nil {
		t.Fatalf("waiter: %v", g.err)
	}
	for k, want := range map[string]Source{"a": SourceWaited, "b": SourceWaited, "c": SourceL2} {
		if r := g.rs[k]; r.Value != "v:"+k || r.Source != want {
			t.Errorf("%s: %+v; want its value from %v", k, r, want)
		}
	}
	if err := <-held; err != nil {
		t.Errorf("holder: %v", err)
	}
	if calls := wl.snapshot(); len(calls) != 0 {
		t.Errorf("waiter's loader calls %v; want none", calls)
	}
	mc, _ := m.collect(t)
	wantCounts(t, mc, telemetry.MetricLockWait, map[string]uint64{
		"herdguard.lock.outcome=waited,herdguard.pipeline=looks": 2,
	})
}

// A batch's first look keeps a key's stale copy: the fallback chain
// serves it when the load fails, and with StaleWhileRevalidate it is
// served at once while another process holds the key.
func TestGetMany_firstLookKeepsStale(t *testing.T) {
	ctx := context.Background()
	cause := errors.New("db down")
	// A long heartbeat: the lock this test takes by hand does not beat,
	// and must not look abandoned.
	lk := LockSettings{Lease: time.Minute, Heartbeat: 20 * time.Second, MaxWait: time.Second, Poll: 20 * time.Millisecond}
	for _, swr := range []bool{false, true} {
		t.Run(map[bool]string{false: "fallback", true: "swr"}[swr], func(t *testing.T) {
			var mem backendtest.Memory
			b := New[string]("stale").Cache(time.Minute).Jitter(0).Stale(time.Hour).Lock(lk).Backend(&mem)
			if swr {
				b = b.StaleWhileRevalidate()
			}
			p := build(t, b)
			// L2 holds a stale copy: stored with a TTL already past.
			e := p.newEntry("v:stale", false, 0, 0)
			e.Expires = time.Now().Add(-time.Second)
			if _, err := p.l2.SetMany(ctx, []rcache.Write[string]{{Key: "k", Entry: e}}); err != nil {
				t.Fatal(err)
			}
			l := &batchLoader{fail: cause}
			if swr {
				// Another process holds the key.
				lease, err := p.locker.TryAcquire(ctx, "k", lk.Lease)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = lease.Release(ctx) }()
			}
			rs, err := p.GetMany(ctx, []string{"k"}, l.load)
			if err != nil {
				t.Fatalf("GetMany: %v", err)
			}
			r := rs["k"]
			if r.Source != SourceStale || r.Value != "v:stale" {
				t.Fatalf("k: %+v; want the stale copy", r)
			}
			calls := l.snapshot()
			switch {
			case swr && len(calls) != 0:
				t.Errorf("loader calls %v; want none: the holder refreshes it", calls)
			case !swr && (len(calls) != 1 || !errors.Is(r.Cause, cause)):
				t.Errorf("loader calls %v, cause %v; want one failed load", calls, r.Cause)
			}
		})
	}
}

// unreadableLock is a backend over m whose views, once they have found a
// key's lock held, answer each later try of it with a problem of the
// key's data (what a backend says of a lock row it cannot decode).
type unreadableLock struct{ m *backendtest.Memory }

func (u unreadableLock) Open(s backend.Scope) (backend.Shared, error) {
	sh, err := u.m.Open(s)
	if err != nil {
		return nil, err
	}
	return &unreadableLockView{Shared: sh}, nil
}

// unreadableLockView is a view of unreadableLock. It has no batch forms,
// so a batch's look tries each key's lock through TryAcquire.
type unreadableLockView struct {
	backend.Shared
	refused atomic.Bool
}

func (v *unreadableLockView) TryAcquire(ctx context.Context, key string, lease time.Duration) (*backend.Lease, error) {
	if v.refused.Load() {
		return nil, fmt.Errorf("lock row of %s: %w", key, cache.ErrCodec)
	}
	l, err := v.Shared.TryAcquire(ctx, key, lease)
	if errors.Is(err, backend.ErrNotAcquired) {
		v.refused.Store(true)
	}
	return l, err
}

// A wait whose look finds a problem with the key's data loads the key
// without the lock, as a miss: the corrupt entry is counted once, and
// no lock outcome is recorded (nothing timed out) nor any failing open,
// for a key's wait as for a batch's.
func TestLooks_dataProblemAfterAWake_countedCorrupt(t *testing.T) {
	ctx := context.Background()
	// A long heartbeat: the lock this test takes by hand does not beat,
	// and must not look abandoned.
	lk := LockSettings{Lease: time.Minute, Heartbeat: 20 * time.Second, MaxWait: time.Minute, Poll: 20 * time.Millisecond}
	for _, batch := range []bool{false, true} {
		name := map[bool]string{false: "get", true: "getmany"}[batch]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mem backendtest.Memory
				holder := build(t, New[string](name).Cache(time.Minute).Lock(lk).Backend(&mem))
				lease, err := holder.locker.TryAcquire(ctx, "k", lk.Lease)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = lease.Release(ctx) }()
				m := newTelMeter(t)
				waiter := build(t, New[string](name).Cache(time.Minute).Lock(lk).
					Backend(unreadableLock{m: &mem}).MeterProvider(m.mp))
				var r Result[string]
				loads := 0
				if batch {
					l := &batchLoader{}
					rs, err := waiter.GetMany(ctx, []string{"k"}, l.load)
					if err != nil {
						t.Fatalf("GetMany: %v", err)
					}
					r, loads = rs["k"], len(l.snapshot())
				} else {
					c := &counter{}
					r, err = waiter.GetResult(ctx, "k", c.load)
					if err != nil {
						t.Fatalf("GetResult: %v", err)
					}
					loads = int(c.calls.Load())
				}
				if r.Value != "v:k" || r.Source != SourceLoader || r.FailedOpen || loads != 1 {
					t.Fatalf("%+v after %d loads; want the loader's value, not failed open, one load", r, loads)
				}
				mc, _ := m.collect(t)
				wantPoints(t, mc, telemetry.MetricCorrupt, map[string]float64{"herdguard.pipeline=" + name + ",herdguard.tier=l2": 1})
				wantCounts(t, mc, telemetry.MetricLockWait, map[string]uint64{})
				wantPoints(t, mc, telemetry.MetricFailOpens, map[string]float64{})
			})
		})
	}
}

// gatedReads is a backend over m whose views' reads (Load) wait until
// open is closed, or until their caller leaves; waits counts the reads
// that waited.
type gatedReads struct {
	m     *backendtest.Memory
	open  chan struct{}
	waits *atomic.Int64
}

func (g gatedReads) Open(s backend.Scope) (backend.Shared, error) {
	sh, err := g.m.Open(s)
	if err != nil {
		return nil, err
	}
	return gatedReadsView{Shared: sh, g: g}, nil
}

// gatedReadsView is a view of gatedReads.
type gatedReadsView struct {
	backend.Shared
	g gatedReads
}

func (v gatedReadsView) Load(ctx context.Context, key string) ([]byte, error) {
	select {
	case <-v.g.open:
	default:
		v.g.waits.Add(1)
		select {
		case <-v.g.open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return v.Shared.Load(ctx, key)
}

// A leader whose context ends during its look leaves at once; the shared
// load, handed off, looks again for the joiner that stays, and serves it
// the loaded value: one load. With Lock the look is the one through the
// lock; without, the read of L2.
func TestGet_leaderLeavesDuringLook_joinerGetsValue(t *testing.T) {
	for _, locked := range []bool{true, false} {
		t.Run(map[bool]string{true: "lock", false: "read"}[locked], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mem backendtest.Memory
				g := gatedReads{m: &mem, open: make(chan struct{}), waits: &atomic.Int64{}}
				b := New[string]("relook").Cache(time.Minute).SingleFlight().Backend(g)
				if locked {
					b = b.Lock(LockSettings{})
				}
				p := build(t, b)
				c := &counter{}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				leader := make(chan error, 1)
				go func() {
					_, err := p.Get(ctx, "k", c.load)
					leader <- err
				}()
				synctest.Wait() // the leader's look waits in its read
				type got struct {
					r   Result[string]
					err error
				}
				joiner := make(chan got, 1)
				go func() {
					r, err := p.GetResult(context.Background(), "k", c.load)
					joiner <- got{r, err}
				}()
				synctest.Wait() // the joiner waits for the leader's flight
				cancel()
				if err := <-leader; !errors.Is(err, context.Canceled) {
					t.Fatalf("leader: %v; want context.Canceled", err)
				}
				synctest.Wait()
				if n := g.waits.Load(); n != 2 {
					t.Fatalf("%d reads waited; want 2: the leader's look, and the flight's look again", n)
				}
				close(g.open)
				j := <-joiner
				if j.err != nil || j.r.Value != "v:k" || j.r.Source != SourceCoalesced || j.r.FailedOpen {
					t.Fatalf("joiner: %+v, %v; want the loaded value, coalesced", j.r, j.err)
				}
				if n := c.calls.Load(); n != 1 {
					t.Fatalf("%d loads, want 1", n)
				}
			})
		})
	}
}
