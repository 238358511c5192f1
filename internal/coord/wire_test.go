package coord

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/backend/backendtest"
	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/keyring"
)

// heard is what a pipeline's Hooks heard: the writes, as key/origin, and
// the resets, each on a channel of its own.
type heard struct {
	writes chan string
	resets chan struct{}
}

func newHeard() *heard {
	return &heard{writes: make(chan string, 16), resets: make(chan struct{}, 16)}
}

func (h *heard) hooks() Hooks {
	return Hooks{
		OnWrite: func(key, origin string) { h.writes <- key + "/" + origin },
		OnReset: func() { h.resets <- struct{}{} },
	}
}

// next waits for what ch hears, or fails the test after a while.
func next[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("heard no %s", what)
		panic("unreachable")
	}
}

func newBreaker(t *testing.T, name string) *breaker.Breaker {
	t.Helper()
	br, err := breaker.New(breaker.Settings{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return br
}

func closeAll(t *testing.T, w *Wired[string]) {
	t.Helper()
	for _, c := range w.Closers {
		if err := c(); err != nil {
			t.Error(err)
		}
	}
}

func testEntry(v string) rcache.Entry[string] {
	now := time.Now()
	return rcache.Entry[string]{Value: v, Written: now, Expires: now.Add(time.Minute), StaleUntil: now.Add(2 * time.Minute)}
}

// origin is an origin tag of rkey.OriginLen bytes.
func origin(c byte) string {
	b := make([]byte, rkey.OriginLen)
	for i := range b {
		b[i] = c
	}
	return string(b)
}

// TestWireRedis: the wiring hands back the guard (with the breaker and
// the timeout it was given), L2 and the notifier, and with Lock the lock;
// writes announced by another pipeline of the namespace reach OnWrite
// with their origin, and a subscription that comes back after its
// connection was killed reaches OnReset; Check runs the probes.
func TestWireRedis(t *testing.T) {
	srv := redistest.Start(t)
	ctx := redistest.Context(t, 30*time.Second)
	br := newBreaker(t, "redis")
	for _, lock := range []bool{false, true} {
		h := newHeard()
		o := Options{Client: srv.Client(), Prefix: "hg:", Namespace: "wired", OpTimeout: time.Second, Breaker: br,
			Lock: lock, Heartbeat: time.Second, Hooks: h.hooks()}
		w, err := WireRedis(o, Deps[string]{})
		if err != nil {
			t.Fatal(err)
		}
		if w.Guard.Breaker != br || w.Guard.OpTimeout != time.Second || w.Guard.Deadline || w.L2 == nil || w.Notifier == nil || w.Coord == nil {
			t.Fatalf("lock %v: %+v, want the guard, L2, the notifier and the seam", lock, w)
		}
		if (w.Locker != nil) != lock {
			t.Fatalf("lock %v: Locker = %v", lock, w.Locker)
		}
		if f := w.Coord.Check(ctx); f != nil {
			t.Fatalf("lock %v: Check = %+v, want nil", lock, f)
		}
		if err := w.Notifier.(interface{ Ready(context.Context) error }).Ready(ctx); err != nil {
			t.Fatal(err)
		}
		other, err := WireRedis(Options{Client: srv.Client(), Prefix: "hg:", Namespace: "wired", OpTimeout: time.Second, Breaker: br,
			Hooks: newHeard().hooks()}, Deps[string]{})
		if err != nil {
			t.Fatal(err)
		}
		wo := rcache.WriteOptions{Origin: origin('b'), FenceRetention: time.Minute, Hold: time.Minute}
		if _, err := other.L2.Write(ctx, "k", testEntry("v"), wo); err != nil {
			t.Fatal(err)
		}
		if got := next(t, h.writes, "write"); got != "k/"+wo.Origin {
			t.Fatalf("lock %v: OnWrite heard %q, want k/%s", lock, got, wo.Origin)
		}
		if e, _, err := w.L2.Get(ctx, "k"); err != nil || e.Value != "v" {
			t.Fatalf("lock %v: Get = %+v, %v; want the other pipeline's write", lock, e, err)
		}
		if err := srv.Client().Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
			t.Fatal(err)
		}
		next(t, h.resets, "reset after the subscription's connection was killed")
		closeAll(t, other)
		closeAll(t, w)
	}
}

// TestWireRedis_refusedSettings: a key layout the cache refuses is a
// setting of Redis; a heartbeat the lock refuses, one of Lock.
func TestWireRedis_refusedSettings(t *testing.T) {
	srv := redistest.Start(t)
	br := newBreaker(t, "redis")
	for _, tc := range []struct {
		name  string
		o     Options
		field string
	}{
		{"braces in the prefix", Options{Prefix: "{hg}:", Namespace: "ns"}, "Redis"},
		{"negative heartbeat", Options{Prefix: "hg:", Namespace: "ns", Lock: true, Heartbeat: -time.Second}, "Lock"},
	} {
		tc.o.Client, tc.o.Breaker, tc.o.OpTimeout, tc.o.Hooks = srv.Client(), br, time.Second, newHeard().hooks()
		w, err := WireRedis(tc.o, Deps[string]{})
		var se *SettingError
		if !errors.As(err, &se) || se.Field != tc.field || se.Problem == "" || w != nil {
			t.Fatalf("%s: %v, %v; want a *SettingError of %s", tc.name, w, err, tc.field)
		}
	}
}

// views is a backend that remembers the views it opened.
type views struct {
	backendtest.Memory
	opened []backend.Shared
}

func (b *views) Open(s backend.Scope) (backend.Shared, error) {
	v, err := b.Memory.Open(s)
	if err == nil {
		b.opened = append(b.opened, v)
	}
	return v, err
}

// TestWireBackend: the wiring opens the pipeline's view and hands back
// the guard (with a deadline on each operation), L2 over the view, the
// view as the notifier and, with Lock, as the lock; the backend's
// announcements reach the hooks until the closers run, which close the
// view.
func TestWireBackend(t *testing.T) {
	br := newBreaker(t, "backend")
	ctx := context.Background()
	for _, lock := range []bool{false, true} {
		var b views
		h := newHeard()
		w, err := WireBackend(Options{Backend: &b, Namespace: "wired", OpTimeout: time.Second, Breaker: br,
			Lock: lock, Heartbeat: time.Second, Hooks: h.hooks()}, Deps[string]{})
		if err != nil {
			t.Fatal(err)
		}
		if len(b.opened) != 1 {
			t.Fatalf("lock %v: %d views opened, want 1", lock, len(b.opened))
		}
		view := b.opened[0]
		if w.Guard.Breaker != br || w.Guard.OpTimeout != time.Second || !w.Guard.Deadline || w.Notifier != view || w.Coord == nil {
			t.Fatalf("lock %v: %+v, want the guard with a deadline, the view and the seam", lock, w)
		}
		if lock && w.Locker != view || !lock && w.Locker != nil {
			t.Fatalf("lock %v: Locker = %v", lock, w.Locker)
		}
		if f := w.Coord.Check(ctx); f != nil {
			t.Fatalf("lock %v: Check = %+v, want nil", lock, f)
		}
		other, err := b.Memory.Open(backend.Scope{Namespace: "wired", Heartbeat: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := other.Announce(ctx, "k", "other"); err != nil {
			t.Fatal(err)
		}
		if got := next(t, h.writes, "write"); got != "k/other" {
			t.Fatalf("lock %v: OnWrite heard %q, want k/other", lock, got)
		}
		b.Memory.Reset()
		next(t, h.resets, "reset")
		wo := rcache.WriteOptions{Origin: "mine", Hold: time.Minute}
		if _, err := w.L2.Write(ctx, "k", testEntry("v"), wo); err != nil {
			t.Fatal(err)
		}
		if got := next(t, h.writes, "write"); got != "k/mine" {
			t.Fatalf("lock %v: OnWrite heard %q of L2's own write, want k/mine", lock, got)
		}
		closeAll(t, w)
		if err := view.Ping(ctx); err == nil {
			t.Fatalf("lock %v: the view answers after the closers ran", lock)
		}
		if err := other.Announce(ctx, "k", "other"); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-h.writes:
			t.Fatalf("lock %v: OnWrite heard %q after the closers ran", lock, got)
		default:
		}
		_ = other.Close()
	}
}

// failingOpen is a backend whose Open fails, or returns nothing at all.
type failingOpen struct{ err error }

func (b failingOpen) Open(backend.Scope) (backend.Shared, error) { return nil, b.err }

// TestWireBackend_refused: Open's error comes back wrapped with the
// pipeline's name; no view, or a view the store cannot use, is a setting
// of Backend, and the view opened is closed.
func TestWireBackend_refused(t *testing.T) {
	br := newBreaker(t, "backend")
	o := Options{Namespace: "ns", OpTimeout: time.Second, Breaker: br, Hooks: newHeard().hooks()}
	down := errors.New("no database")
	o.Backend = failingOpen{err: down}
	_, err := WireBackend(o, Deps[string]{})
	if !errors.Is(err, down) || err.Error() != `resilience: pipeline "ns": open the backend: no database` {
		t.Fatalf("Open failing: %v, want it wrapped with the pipeline's name", err)
	}
	o.Backend = failingOpen{}
	_, err = WireBackend(o, Deps[string]{})
	var se *SettingError
	if !errors.As(err, &se) || se.Field != "Backend" || se.Problem != "Open returned no view and no error" {
		t.Fatalf("Open returning nothing: %v, want a *SettingError of Backend", err)
	}
	var b views
	o.Backend, o.Encrypt = &b, new(keyring.Ring)
	_, err = WireBackend(o, Deps[string]{})
	if !errors.As(err, &se) || se.Field != "Backend" || len(b.opened) != 1 {
		t.Fatalf("a keyring without keys: %v, want a *SettingError of Backend", err)
	}
	if err := b.opened[0].Ping(context.Background()); err == nil {
		t.Fatal("the view refused is still open")
	}
}
