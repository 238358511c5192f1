package resilience

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/backend/backendtest"
	sflight "github.com/herdguard/herdguard/internal/flight"
)

// exitingBackend opens views of a backendtest.Memory whose next Load,
// once armed, waits for release and then exits its goroutine with
// runtime.Goexit, as a fake's t.FailNow would: user code that ends a
// shared load without returning.
type exitingBackend struct {
	m       backendtest.Memory
	armed   atomic.Bool
	release chan struct{}
	// saving, once armed, makes the next Save exit (it waits for
	// release first), in place of a Load.
	saving atomic.Bool
}

func (b *exitingBackend) Open(s backend.Scope) (backend.Shared, error) {
	v, err := b.m.Open(s)
	if err != nil {
		return nil, err
	}
	return exitingView{Shared: v, b: b}, nil
}

type exitingView struct {
	backend.Shared
	b *exitingBackend
}

func (v exitingView) Load(ctx context.Context, key string) ([]byte, error) {
	if v.b.armed.CompareAndSwap(true, false) {
		<-v.b.release
		runtime.Goexit()
	}
	return v.Shared.Load(ctx, key)
}

func (v exitingView) Save(ctx context.Context, key string, raw []byte, s backend.Save) (bool, error) {
	if v.b.saving.CompareAndSwap(true, false) {
		<-v.b.release
		runtime.Goexit()
	}
	return v.Shared.Save(ctx, key, raw, s)
}

// TestFlight_joinersOfARefreshThatExits: a Get and a GetMany that join a
// background refresh whose goroutine exits before the refresh returns
// (its look at the backend calls runtime.Goexit) each get an error, not
// an empty value.
func TestFlight_joinersOfARefreshThatExits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &exitingBackend{release: make(chan struct{})}
		p := build(t, New[string]("exit").Cache(30*time.Millisecond).Jitter(0).Stale(time.Hour).
			StaleWhileRevalidate().SingleFlight().Backend(b))
		ctx := context.Background()
		if _, err := p.Get(ctx, "k", okLoad); err != nil {
			t.Fatal(err)
		}
		untilL1Stale(t, p, "k")
		b.armed.Store(true)
		if r, err := p.GetResult(ctx, "k", okLoad); err != nil || r.Source != SourceStale {
			t.Fatalf("%+v, %v; want the stale copy, and a refresh", r, err)
		}
		synctest.Wait() // the refresh's look waits in the backend
		// The next calls miss L1, and join the refresh's flight.
		if err := p.Invalidate(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		type got struct {
			call string
			r    Result[string]
			err  error
		}
		calls := make(chan got, 2)
		go func() {
			r, err := p.GetResult(ctx, "k", okLoad)
			calls <- got{"GetResult", r, err}
		}()
		go func() {
			rs, err := p.GetMany(ctx, []string{"k"}, func(context.Context, []string) (map[string]string, error) {
				return map[string]string{"k": "batch"}, nil
			})
			var ke KeyErrors
			if errors.As(err, &ke) {
				err = ke["k"]
			}
			calls <- got{"GetMany", rs["k"], err}
		}()
		synctest.Wait() // both wait for the refresh's flight
		if !p.group.Waited("k") {
			t.Fatal("nobody waits for the refresh of k; want both calls to join it")
		}
		close(b.release)
		for range 2 {
			c := <-calls
			if !errors.Is(c.err, sflight.ErrExited) {
				t.Errorf("%s = %+v, %v; want the error of a shared load that exited", c.call, c.r, c.err)
			}
		}
	})
}

// TestFlight_loadThatExits_endsItsFlight: a shared load, a Get's or a
// GetMany's, whose goroutine exits before it returns (its write-back to
// the backend calls runtime.Goexit) still ends its flight: the callers
// waiting for it get the error of a shared load that exited, and the next
// call of the key loads anew instead of joining a flight that never ends.
func TestFlight_loadThatExits_endsItsFlight(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(map[bool]string{false: "Get", true: "GetMany"}[batch], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := &exitingBackend{release: make(chan struct{})}
				p := build(t, New[string]("exit-load").Cache(time.Minute).SingleFlight().Backend(b))
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				get := func() error {
					if !batch {
						_, err := p.Get(ctx, "k", okLoad)
						return err
					}
					_, err := p.GetMany(ctx, []string{"k"}, func(_ context.Context, keys []string) (map[string]string, error) {
						return map[string]string{"k": "v:k"}, nil
					})
					var ke KeyErrors
					if errors.As(err, &ke) {
						return ke["k"]
					}
					return err
				}
				b.saving.Store(true)
				errs := make(chan error, 2)
				go func() { errs <- get() }()
				synctest.Wait() // the load's write-back waits in the backend
				go func() { errs <- get() }()
				synctest.Wait() // the second call joined the flight
				close(b.release)
				for range 2 {
					if err := <-errs; !errors.Is(err, sflight.ErrExited) {
						t.Errorf("a caller of the load that exited got %v; want the error of a shared load that exited", err)
					}
				}
				if err := get(); err != nil {
					t.Fatalf("the next call = %v; want a new load", err)
				}
			})
		})
	}
}
