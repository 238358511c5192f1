package resilience

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/backend/backendtest"
	"github.com/herdguard/herdguard/telemetry"
)

// downAfter is a backend over m whose views' batch reads fail while down
// is set, and which report on refused each key whose lock a batch's look
// found held.
type downAfter struct {
	m       *backendtest.Memory
	down    *atomic.Bool
	refused chan string
}

func (d downAfter) Open(s backend.Scope) (backend.Shared, error) {
	sh, err := d.m.Open(s)
	if err != nil {
		return nil, err
	}
	return downAfterView{Shared: sh, many: sh.(backend.SharedMany), d: d}, nil
}

// downAfterView is a view of downAfter, with the batch forms.
type downAfterView struct {
	backend.Shared
	many backend.SharedMany
	d    downAfter
}

func (v downAfterView) LoadMany(ctx context.Context, keys []string) ([][]byte, error) {
	if v.d.down.Load() {
		return nil, errors.New("store down")
	}
	return v.many.LoadMany(ctx, keys)
}

func (v downAfterView) TryAcquireMany(ctx context.Context, keys []string, ttl time.Duration) ([]*backend.Lease, []error) {
	leases, errs := v.many.TryAcquireMany(ctx, keys, ttl)
	for i, err := range errs {
		if errors.Is(err, backend.ErrNotAcquired) {
			select {
			case v.d.refused <- keys[i]:
			default: // a later poll's refusal: the test heard the first
			}
		}
	}
	return leases, errs
}

// A batch's look after a wake that fails as a whole loads the keys it
// looked at without the service, failing open, each recorded with the
// lock outcome failed_open.
func TestGetMany_lookAfterAWakeFails_failsOpen(t *testing.T) {
	ctx := context.Background()
	var mem backendtest.Memory
	m := newTelMeter(t)
	lk := LockSettings{MaxWait: time.Minute, Poll: 20 * time.Millisecond}
	holder := build(t, New[string]("wake-fails").Cache(time.Minute).Lock(lk).Backend(&mem))
	var down atomic.Bool
	refused := make(chan string, 16)
	waiter := build(t, New[string]("wake-fails").Cache(time.Minute).Lock(lk).
		Backend(downAfter{m: &mem, down: &down, refused: refused}).MeterProvider(m.mp))
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
		rs, err := waiter.GetMany(ctx, []string{"a", "b"}, wl.load)
		done <- got{rs, err}
	}()
	// The waiter's first look found both held: every later look fails.
	for seen := map[string]bool{}; !seen["a"] || !seen["b"]; {
		seen[<-refused] = true
	}
	down.Store(true)
	close(hl.gate)
	g := <-done
	if g.err != nil {
		t.Fatalf("waiter: %v", g.err)
	}
	for _, k := range []string{"a", "b"} {
		if r := g.rs[k]; r.Value != "v:"+k || r.Source != SourceLoader || !r.FailedOpen {
			t.Errorf("%s: %+v; want its value from the loader, failed open", k, r)
		}
	}
	if err := <-held; err != nil {
		t.Errorf("holder: %v", err)
	}
	mc, _ := m.collect(t)
	wantCounts(t, mc, telemetry.MetricLockWait, map[string]uint64{
		"herdguard.lock.outcome=failed_open,herdguard.pipeline=wake-fails": 2,
	})
}
