package resilience_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/backend/backendtest"
	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/keyring"
	"github.com/herdguard/herdguard/resilience"
	"github.com/herdguard/herdguard/telemetry"
)

// buildOver builds b and closes the pipeline with the test.
func buildOver[V any](t *testing.T, b *resilience.Builder[V]) *resilience.Pipeline[V] {
	t.Helper()
	p, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// perKey counts loader calls per key.
type perKey struct {
	mu    sync.Mutex
	loads map[string]int
	delay time.Duration
}

func (c *perKey) load(ctx context.Context, key string) (string, error) {
	c.mu.Lock()
	if c.loads == nil {
		c.loads = map[string]int{}
	}
	c.loads[key]++
	c.mu.Unlock()
	select {
	case <-time.After(c.delay):
	case <-ctx.Done():
		return "", ctx.Err()
	}
	return "v-" + key, nil
}

func (c *perKey) loadMany(ctx context.Context, keys []string) (map[string]string, error) {
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		c.mu.Lock()
		if c.loads == nil {
			c.loads = map[string]int{}
		}
		c.loads[k]++
		c.mu.Unlock()
		out[k] = "v-" + k
	}
	select {
	case <-time.After(c.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return out, nil
}

func (c *perKey) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.loads[key]
}

func coldKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return keys
}

func overMemory(name string, m backend.Backend) *resilience.Builder[string] {
	return resilience.New[string](name).Cache(time.Minute).Lock(resilience.LockSettings{}).Backend(m)
}

// Two pipelines of one name over one backend stand for two processes:
// 64 callers each, on 20 cold keys, load each key once.
func TestBackend_twoPipelines_oneLoadPerKey(t *testing.T) {
	for _, many := range []bool{false, true} {
		t.Run(map[bool]string{false: "Get", true: "GetMany"}[many], func(t *testing.T) {
			var m backendtest.Memory
			ps := []*resilience.Pipeline[string]{buildOver(t, overMemory("herd", &m)), buildOver(t, overMemory("herd", &m))}
			c := &perKey{delay: 30 * time.Millisecond}
			keys := coldKeys("k", 20)
			var wg sync.WaitGroup
			var failed atomic.Int64
			start := make(chan struct{})
			for _, p := range ps {
				for range 64 {
					wg.Go(func() {
						<-start
						ks := append([]string(nil), keys...)
						rand.Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
						if many {
							res, err := p.GetMany(context.Background(), ks, c.loadMany)
							for _, k := range ks {
								if err != nil || res[k].Value != "v-"+k {
									failed.Add(1)
									t.Errorf("GetMany: %q = %+v, %v", k, res[k], err)
								}
							}
							return
						}
						for _, k := range ks {
							if v, err := p.Get(context.Background(), k, c.load); err != nil || v != "v-"+k {
								failed.Add(1)
								t.Errorf("Get(%q) = %q, %v", k, v, err)
							}
						}
					})
				}
			}
			close(start)
			wg.Wait()
			for _, k := range keys {
				if n := c.count(k); n != 1 {
					t.Errorf("key %q loaded %d times, want once", k, n)
				}
			}
		})
	}
}

// A holder whose lease was revoked writes nothing back: the backend
// refuses the value it loaded, which stays out of L1 too.
func TestBackend_revokedLease_writeRefused(t *testing.T) {
	var m backendtest.Memory
	a := buildOver(t, overMemory("revoke", &m))
	b := buildOver(t, overMemory("revoke", &m))
	raw, err := m.Open(backend.Scope{Namespace: "revoke", Heartbeat: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ctx := context.Background()
	loading, finish := make(chan struct{}), make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		_, err := a.Get(ctx, "k", func(context.Context, string) (string, error) {
			once.Do(func() { close(loading) })
			<-finish
			return "old", nil
		})
		done <- err
	}()
	<-loading
	// Revoked alone: no tombstone, no announcement; only the grant ends.
	if _, err := raw.NextFence(ctx, "k", true); err != nil {
		t.Fatal(err)
	}
	close(finish)
	if err := <-done; err != nil {
		t.Fatalf("the holder's caller got %v", err)
	}
	if b, err := raw.Load(ctx, "k"); b != nil || err != nil {
		t.Fatalf("the revoked holder wrote %q (%v)", b, err)
	}
	if v, found, _ := a.Peek(ctx, "k"); found {
		t.Fatalf("the holder's L1 kept the refused value %q", v)
	}
	// A load after it writes as usual.
	if v, err := a.Get(ctx, "k", func(context.Context, string) (string, error) { return "new", nil }); err != nil || v != "new" {
		t.Fatalf("Get after the revocation = %q, %v", v, err)
	}
	if v, found, err := b.Peek(ctx, "k"); !found || v != "new" || err != nil {
		t.Fatalf("Peek = %q, %v, %v; want new", v, found, err)
	}
}

// failing is a Backend whose views fail every call while down is set.
type failing struct {
	m        backendtest.Memory
	down     atomic.Bool
	lockDown atomic.Bool // TryAcquire alone fails
	slow     atomic.Bool // calls block until their context ends instead
}

var errDown = errors.New("backend down")

func (f *failing) Open(s backend.Scope) (backend.Shared, error) {
	v, err := f.m.Open(s)
	if err != nil {
		return nil, err
	}
	return &failingView{Shared: v, f: f}, nil
}

type failingView struct {
	backend.Shared
	f *failing
}

func (v *failingView) fail(ctx context.Context) error {
	if v.f.slow.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	if v.f.down.Load() {
		return errDown
	}
	return nil
}

func (v *failingView) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*backend.Lease, error) {
	if v.f.lockDown.Load() {
		return nil, &backend.BackendError{Op: "acquire", Err: errDown}
	}
	if err := v.fail(ctx); err != nil {
		return nil, &backend.BackendError{Op: "acquire", Err: err}
	}
	return v.Shared.TryAcquire(ctx, key, ttl)
}

func (v *failingView) Load(ctx context.Context, key string) ([]byte, error) {
	if err := v.fail(ctx); err != nil {
		return nil, err
	}
	return v.Shared.Load(ctx, key)
}

func (v *failingView) Save(ctx context.Context, key string, raw []byte, s backend.Save) (bool, error) {
	if err := v.fail(ctx); err != nil {
		return false, err
	}
	return v.Shared.Save(ctx, key, raw, s)
}

func (v *failingView) NextFence(ctx context.Context, key string, revoke bool) (int64, error) {
	if err := v.fail(ctx); err != nil {
		return 0, err
	}
	return v.Shared.NextFence(ctx, key, revoke)
}

func (v *failingView) Notify(ctx context.Context, key string) error {
	if err := v.fail(ctx); err != nil {
		return err
	}
	return v.Shared.Notify(ctx, key)
}

func (v *failingView) Ping(ctx context.Context) error {
	if err := v.fail(ctx); err != nil {
		return err
	}
	return v.Shared.Ping(ctx)
}

// A backend that fails costs no caller its value: every call loads
// without it (failing open), Get and GetMany alike.
func TestBackend_failing_everyCallerGetsItsValue(t *testing.T) {
	for _, tc := range []struct {
		name           string
		many, lockOnly bool
	}{{"Get", false, false}, {"GetMany", true, false}, {"Get/lock", false, true}, {"GetMany/lock", true, true}} {
		many := tc.many
		t.Run(tc.name, func(t *testing.T) {
			f := &failing{}
			f.down.Store(!tc.lockOnly)
			f.lockDown.Store(tc.lockOnly)
			p := buildOver(t, overMemory("down", f).Timeout(time.Second))
			c := &perKey{delay: 5 * time.Millisecond}
			keys := coldKeys("d", 20)
			var wg sync.WaitGroup
			for range 64 {
				wg.Go(func() {
					if many {
						res, err := p.GetMany(context.Background(), keys, c.loadMany)
						for _, k := range keys {
							if err != nil || res[k].Value != "v-"+k || !res[k].FailedOpen && res[k].Source != resilience.SourceL1 {
								t.Errorf("GetMany: %q = %+v, %v", k, res[k], err)
							}
						}
						return
					}
					for _, k := range keys {
						r, err := p.GetResult(context.Background(), k, c.load)
						if err != nil || r.Value != "v-"+k || !r.FailedOpen && r.Source != resilience.SourceL1 {
							t.Errorf("GetResult(%q) = %+v, %v", k, r, err)
						}
					}
				})
			}
			wg.Wait()
			if tc.lockOnly {
				return
			}
			if err := p.Check(context.Background()); !errors.Is(err, errDown) {
				t.Fatalf("Check of a failing backend = %v", err)
			}
			var ce *resilience.CheckError
			if err := p.Check(context.Background()); !errors.As(err, &ce) {
				t.Fatalf("Check's error is %T, want *CheckError", err)
			}
			if _, ok := p.Health().Breakers["backend"]; !ok {
				t.Fatalf("Health has no backend breaker: %v", p.Health().Breakers)
			}
		})
	}
}

// A backend call that hangs is cut at OpTimeout: the call fails open at
// once, not at its caller's deadline.
func TestBackend_opTimeout_failsOpen(t *testing.T) {
	f := &failing{}
	f.slow.Store(true)
	p := buildOver(t, overMemory("slow", f).BackendOptions(resilience.BackendOptions{OpTimeout: 20 * time.Millisecond}))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	r, err := p.GetResult(ctx, "k", func(context.Context, string) (string, error) { return "v", nil })
	if err != nil || r.Value != "v" || !r.FailedOpen {
		t.Fatalf("GetResult = %+v, %v; want v, failed open", r, err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("a hanging backend held the call %v", took)
	}
}

// Set and Invalidate in one pipeline drop the other's L1 copy.
func TestBackend_setInvalidate_dropOtherL1(t *testing.T) {
	var m backendtest.Memory
	a := buildOver(t, overMemory("writes", &m))
	b := buildOver(t, overMemory("writes", &m))
	ctx := context.Background()
	var loads atomic.Int64
	load := func(context.Context, string) (string, error) { loads.Add(1); return "loaded", nil }
	if v, err := b.Get(ctx, "k", load); err != nil || v != "loaded" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	if err := a.Set(ctx, "k", "set"); err != nil {
		t.Fatal(err)
	}
	r, err := b.GetResult(ctx, "k", load)
	if err != nil || r.Value != "set" || r.Source != resilience.SourceL2 {
		t.Fatalf("after Set elsewhere, GetResult = %+v, %v; want set from L2", r, err)
	}
	if err := a.Invalidate(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	r, err = b.GetResult(ctx, "k", load)
	if err != nil || r.Value != "loaded" || r.Source != resilience.SourceLoader || loads.Load() != 2 {
		t.Fatalf("after Invalidate elsewhere, GetResult = %+v, %v (%d loads); want a load", r, err, loads.Load())
	}
	// A lost watch drops every L1 copy.
	if r, _ := b.GetResult(ctx, "k", load); r.Source != resilience.SourceL1 {
		t.Fatalf("GetResult after the load: %+v, want from L1", r)
	}
	m.Reset()
	if r, _ := b.GetResult(ctx, "k", load); r.Source != resilience.SourceL2 {
		t.Fatalf("GetResult after a reset of the watch: %+v, want from L2", r)
	}
}

// With BackendOptions.Encrypt the backend holds sealed bytes, which the
// pipelines with the keyring read back.
func TestBackend_encrypt_sealedInStore(t *testing.T) {
	var m backendtest.Memory
	ring, err := keyring.New(keyring.Key{ID: 7, Secret: bytes.Repeat([]byte{0x5a}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	opts := resilience.BackendOptions{Encrypt: ring}
	a := buildOver(t, overMemory("sealed", &m).BackendOptions(opts))
	b := buildOver(t, overMemory("sealed", &m).BackendOptions(opts))
	ctx := context.Background()
	const secret = "plaintext-that-must-not-show"
	if _, err := a.Get(ctx, "k", func(context.Context, string) (string, error) { return secret, nil }); err != nil {
		t.Fatal(err)
	}
	if err := a.Set(ctx, "s", secret); err != nil {
		t.Fatal(err)
	}
	raw, err := m.Open(backend.Scope{Namespace: "sealed", Heartbeat: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, k := range []string{"k", "s"} {
		b, err := raw.Load(ctx, k)
		if err != nil || b == nil {
			t.Fatalf("Load(%q) = %q, %v", k, b, err)
		}
		if bytes.Contains(b, []byte(secret)) {
			t.Fatalf("the store holds %q in clear: %q", k, b)
		}
	}
	for _, k := range []string{"k", "s"} {
		r, err := b.GetResult(ctx, k, func(context.Context, string) (string, error) { return "reloaded", nil })
		if err != nil || r.Value != secret || r.Source != resilience.SourceL2 {
			t.Fatalf("GetResult(%q) = %+v, %v; want the sealed value from L2", k, r, err)
		}
	}
}

// recording is a Backend that records its Opens and their Closes.
type recording struct {
	m      backendtest.Memory
	scopes []backend.Scope
	closed atomic.Int64
}

func (r *recording) Open(s backend.Scope) (backend.Shared, error) {
	r.scopes = append(r.scopes, s)
	v, err := r.m.Open(s)
	return &closeCounting{Shared: v, n: &r.closed}, err
}

type closeCounting struct {
	backend.Shared
	n *atomic.Int64
}

func (c *closeCounting) Close() error { c.n.Add(1); return c.Shared.Close() }

func TestBackend_build_opensAndCloses(t *testing.T) {
	r := &recording{}
	p, err := resilience.New[string]("scoped").Cache(time.Minute).
		Lock(resilience.LockSettings{Lease: 9 * time.Second, Heartbeat: time.Second}).Backend(r).Build()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.scopes) != 1 || r.scopes[0] != (backend.Scope{Namespace: "scoped", Heartbeat: time.Second}) {
		t.Fatalf("opened with %+v", r.scopes)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if r.closed.Load() != 1 {
		t.Fatalf("the view was closed %d times, want once", r.closed.Load())
	}
}

func TestBackend_build_refusesBadConfig(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	var m backendtest.Memory
	var nilMemory *backendtest.Memory
	for name, b := range map[string]*resilience.Builder[string]{
		"Redis and Backend": resilience.New[string]("x").Cache(time.Minute).Redis(client).Backend(&m),
		"nil":               resilience.New[string]("x").Cache(time.Minute).Backend(nil),
		"typed nil":         resilience.New[string]("x").Cache(time.Minute).Backend(nilMemory),
		"negative timeout":  resilience.New[string]("x").Cache(time.Minute).Backend(&m).BackendOptions(resilience.BackendOptions{OpTimeout: -1}),
		"empty keyring":     resilience.New[string]("x").Cache(time.Minute).Backend(&m).BackendOptions(resilience.BackendOptions{Encrypt: &keyring.Ring{}}),
		"no cache":          resilience.New[string]("x").Backend(&m),
	} {
		p, err := b.Build()
		var ce *resilience.ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("%s: Build = %v, want a *ConfigError", name, err)
		}
		if p != nil {
			_ = p.Close()
		}
	}
}

// L2 spans name the backend's system, and Health its watch.
func TestBackend_spansAndHealth(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	var m backendtest.Memory
	p := buildOver(t, overMemory("spans", &m).TracerProvider(tp))
	if _, err := p.Get(context.Background(), "k", func(context.Context, string) (string, error) { return "v", nil }); err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, sp := range rec.Ended() {
		if sp.Name() != telemetry.SpanL2 && sp.Name() != telemetry.SpanWriteBack {
			continue
		}
		sys := ""
		for _, a := range sp.Attributes() {
			switch a.Key {
			case telemetry.DBSystemName:
				sys = a.Value.AsString()
			case telemetry.DBOperationName:
				ops = append(ops, a.Value.AsString())
			}
		}
		if sys != "memory" {
			t.Errorf("span %s has db.system.name %q, want memory", sp.Name(), sys)
		}
	}
	if !slices.Contains(ops, "Load") || !slices.Contains(ops, "Save") {
		t.Errorf("L2 spans' operations: %v, want Load and Save", ops)
	}
	if h := p.Health(); !h.Subscribed || h.Breakers["backend"] != breaker.Closed {
		t.Errorf("Health = %+v, want subscribed and the backend breaker closed", h)
	}
}

type refusing struct{}

var errRefused = errors.New("no database")

func (refusing) Open(backend.Scope) (backend.Shared, error) { return nil, errRefused }

func TestBackend_build_openFails(t *testing.T) {
	p, err := resilience.New[string]("x").Cache(time.Minute).Backend(refusing{}).Build()
	if p != nil || !errors.Is(err, errRefused) {
		t.Fatalf("Build = %v, %v; want Open's error", p, err)
	}
}

// systemView is a view with a System name.
type systemView struct {
	backend.Shared
	system string
}

func (v systemView) System() string { return v.system }

// systemBackend opens its backend's views with a System name.
type systemBackend struct {
	backend.Backend
	system string
}

func (b systemBackend) Open(s backend.Scope) (backend.Shared, error) {
	v, err := b.Backend.Open(s)
	if err != nil {
		return nil, err
	}
	return systemView{Shared: v, system: b.system}, nil
}

// Check on a backend that does not answer names the backend it checked,
// by its System name when it has one, and never Redis.
func TestCheck_backendDown_namesTheBackend(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend func(*failing) backend.Backend
		want    string
	}{
		{"with System", func(f *failing) backend.Backend { return systemBackend{Backend: f, system: "memory"} }, "memory check: "},
		{"without System", func(f *failing) backend.Backend { return f }, "backend check: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &failing{}
			p := buildOver(t, overMemory("chk", tc.backend(f)))
			if err := p.Check(context.Background()); err != nil {
				t.Fatalf("Check of a working backend = %v", err)
			}
			f.down.Store(true)
			err := p.Check(context.Background())
			var ce *resilience.CheckError
			if !errors.As(err, &ce) || !errors.Is(err, errDown) {
				t.Fatalf("Check of a failing backend = %v, want a *CheckError wrapping %v", err, errDown)
			}
			msg := err.Error()
			if want := `resilience: pipeline "chk": ` + tc.want + "the backend does not answer: " + errDown.Error(); msg != want {
				t.Errorf("Check says %q, want %q", msg, want)
			}
			if strings.Contains(msg, "Redis") || strings.Contains(msg, `""`) {
				t.Errorf("Check says %q: names Redis or an empty name", msg)
			}
		})
	}
}

// beatWatch is a backend whose second Load of a key (the read after its
// grant) waits until the lease has beaten, or until its context ends: a
// read stuck behind a burst's other reads.
type beatWatch struct {
	m backendtest.Memory
}

func (b *beatWatch) Open(s backend.Scope) (backend.Shared, error) {
	v, err := b.m.Open(s)
	if err != nil {
		return nil, err
	}
	return &beatWatchView{Shared: v, beat: make(chan struct{}), loads: map[string]int{}}, nil
}

type beatWatchView struct {
	backend.Shared
	beatOnce sync.Once
	beat     chan struct{} // closed at the first Extend

	mu    sync.Mutex // guards loads
	loads map[string]int
}

func (v *beatWatchView) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*backend.Lease, error) {
	l, err := v.Shared.TryAcquire(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return backend.NewLease(v, backend.Grant{Key: l.Key(), Token: l.Token(), Fence: l.Fence(), TTL: l.TTL(), Heartbeat: l.Every(), TookOver: l.TookOver()}), nil
}

func (v *beatWatchView) Extend(ctx context.Context, key, token string, ttl time.Duration) error {
	v.beatOnce.Do(func() { close(v.beat) })
	return v.Shared.(backend.Holder).Extend(ctx, key, token, ttl)
}

func (v *beatWatchView) Release(ctx context.Context, key, token string) error {
	return v.Shared.(backend.Holder).Release(ctx, key, token)
}

func (v *beatWatchView) Load(ctx context.Context, key string) ([]byte, error) {
	v.mu.Lock()
	v.loads[key]++
	n := v.loads[key]
	v.mu.Unlock()
	if n == 2 {
		select {
		case <-v.beat:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return v.Shared.Load(ctx, key)
}

// TestBackend_leaseBeatsFromItsGrant: a backend reads and locks in two
// steps, and the read after the grant may wait behind a burst's other
// reads for longer than a beat: the lease beats meanwhile, so that other
// processes do not take a live holder for a dead one. (Here the read
// waits for the beat itself: without it, the read runs out of its
// operation timeout and the call fails open.)
func TestBackend_leaseBeatsFromItsGrant(t *testing.T) {
	p := buildOver(t, resilience.New[string]("beats").Cache(time.Minute).
		Lock(resilience.LockSettings{Heartbeat: 20 * time.Millisecond}).
		BackendOptions(resilience.BackendOptions{OpTimeout: 5 * time.Second}).
		Backend(&beatWatch{}))
	r, err := p.GetResult(context.Background(), "k", func(context.Context, string) (string, error) { return "v", nil })
	if err != nil || r.Value != "v" || r.FailedOpen || r.Source != resilience.SourceLoader {
		t.Fatalf("GetResult = %+v, %v; want v from the loader, not failed open: the lease did not beat during the read after its grant", r, err)
	}
}
