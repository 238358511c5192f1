package resilience

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/obs"
	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/telemetry"
)

// telRec is an SDK TracerProvider that keeps every span in memory, and
// reports each span start to onStart (if set) for tests that must act while
// a call is under way.
type telRec struct {
	*tracetest.SpanRecorder
	tp *sdktrace.TracerProvider

	mu      sync.Mutex
	started []sdktrace.ReadWriteSpan
}

func newTelRec(t *testing.T) *telRec {
	t.Helper()
	r := &telRec{SpanRecorder: tracetest.NewSpanRecorder()}
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = r.tp.Shutdown(context.Background()) })
	return r
}

func (r *telRec) OnStart(ctx context.Context, s sdktrace.ReadWriteSpan) {
	r.mu.Lock()
	r.started = append(r.started, s)
	r.mu.Unlock()
	r.SpanRecorder.OnStart(ctx, s)
}

// startedNamed counts the started spans named name.
func (r *telRec) startedNamed(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.started {
		if s.Name() == name {
			n++
		}
	}
	return n
}

// call runs fn under a test span of its own, so that the spans of one call
// can be told from those of others, and returns the test span's context.
func (r *telRec) call(name string, fn func(ctx context.Context)) trace.SpanContext {
	ctx, sp := r.tp.Tracer("test").Start(context.Background(), name)
	fn(ctx)
	sp.End()
	return sp.SpanContext()
}

// tree renders the spans under the test span root, depth first, children in
// start order: one line per span with its kind (if not internal), its
// attributes (sorted, without the volatile ones), events, links and status.
func (r *telRec) tree(t *testing.T, root trace.SpanContext) string {
	t.Helper()
	kids := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	for _, s := range r.Ended() {
		if s.SpanContext().TraceID() == root.TraceID() {
			kids[s.Parent().SpanID()] = append(kids[s.Parent().SpanID()], s)
		}
	}
	var b strings.Builder
	var walk func(id trace.SpanID, depth int)
	walk = func(id trace.SpanID, depth int) {
		ss := kids[id]
		sort.SliceStable(ss, func(i, j int) bool { return ss[i].StartTime().Before(ss[j].StartTime()) })
		for _, s := range ss {
			b.WriteString(strings.Repeat("  ", depth))
			b.WriteString(spanLine(s))
			b.WriteByte('\n')
			walk(s.SpanContext().SpanID(), depth+1)
		}
	}
	walk(root.SpanID(), 0)
	return b.String()
}

// volatile attributes differ from run to run; tests check them apart.
var volatile = map[attribute.Key]bool{
	telemetry.LockWaitMS: true, telemetry.LockFence: true, telemetry.Key: true,
}

func spanLine(s sdktrace.ReadOnlySpan) string {
	var parts []string
	parts = append(parts, s.Name())
	if s.SpanKind() != trace.SpanKindInternal {
		parts = append(parts, "("+s.SpanKind().String()+")")
	}
	var attrs []string
	for _, kv := range s.Attributes() {
		if !volatile[kv.Key] {
			attrs = append(attrs, string(kv.Key)+"="+kv.Value.String())
		}
	}
	sort.Strings(attrs)
	if len(attrs) > 0 {
		parts = append(parts, "["+strings.Join(attrs, " ")+"]")
	}
	if ev := s.Events(); len(ev) > 0 {
		names := make([]string, len(ev))
		for i, e := range ev {
			names[i] = e.Name
		}
		parts = append(parts, "events=["+strings.Join(names, ",")+"]")
	}
	if n := len(s.Links()); n > 0 {
		parts = append(parts, fmt.Sprintf("links=%d", n))
	}
	if s.Status().Code != codes.Unset {
		parts = append(parts, "status="+s.Status().Code.String())
	}
	return strings.Join(parts, " ")
}

// spansNamed returns the ended spans of the trace of root named name.
func (r *telRec) spansNamed(root trace.SpanContext, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.Ended() {
		if s.SpanContext().TraceID() == root.TraceID() && s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attrOf(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func wantTree(t *testing.T, got, want string) {
	t.Helper()
	want = strings.TrimLeft(want, "\n")
	if got != want {
		t.Fatalf("span tree:\n%s\nwant:\n%s", got, want)
	}
}

// telGet is GetResult that fails the test on an unexpected error.
func telGet(t *testing.T, ctx context.Context, p *Pipeline[string], key string, load LoadFunc[string]) Result[string] {
	t.Helper()
	r, err := p.GetResult(ctx, key, load)
	if err != nil {
		t.Fatalf("GetResult(%q): %v", key, err)
	}
	return r
}

// telPod builds a pipeline named "tel" on its own client of s, as one
// process (pod) of a fleet would.
func telPod(t *testing.T, s *redistest.Server, tp trace.TracerProvider, lockOn bool) *Pipeline[string] {
	t.Helper()
	b := New[string]("tel").Cache(time.Minute).SingleFlight().TracerProvider(tp).
		Redis(s.Client()).RedisOptions(RedisOptions{OpTimeout: 500 * time.Millisecond})
	if lockOn {
		b = b.Lock(LockSettings{MaxWait: 20 * time.Second, Poll: 3 * time.Second})
	}
	return build(t, b)
}

func okLoad(_ context.Context, key string) (string, error) { return "v:" + key, nil }

// The TestTelemetry_tree_* tests share their shape (build, call, expected
// span tree) but not a table: each tree is the documentation of one path,
// read whole, and each needs its own setup.
func TestTelemetry_tree_L1Hit(t *testing.T) {
	rec := newTelRec(t)
	p := build(t, New[string]("tel").Cache(time.Minute).SingleFlight().TracerProvider(rec.tp))
	telGet(t, context.Background(), p, "k", okLoad)
	root := rec.call("test", func(ctx context.Context) {
		if r := telGet(t, ctx, p, "k", okLoad); r.Source != SourceL1 {
			t.Fatalf("source = %v, want l1", r.Source)
		}
	})
	wantTree(t, rec.tree(t, root), `
resilience.get [herdguard.failed_open=false herdguard.pipeline=tel herdguard.source=l1]
  resilience.l1 [herdguard.cache.freshness=fresh herdguard.cache.hit=true]
`)
}

func TestTelemetry_tree_L2Hit(t *testing.T) {
	s := redistest.Start(t)
	rec := newTelRec(t)
	podA, podB := telPod(t, s, rec.tp, false), telPod(t, s, rec.tp, false)
	telGet(t, context.Background(), podA, "k", okLoad)
	root := rec.call("test", func(ctx context.Context) {
		if r := telGet(t, ctx, podB, "k", okLoad); r.Source != SourceL2 {
			t.Fatalf("source = %v, want l2", r.Source)
		}
	})
	wantTree(t, rec.tree(t, root), `
resilience.get [herdguard.failed_open=false herdguard.pipeline=tel herdguard.source=l2]
  resilience.l1 [herdguard.cache.freshness=miss herdguard.cache.hit=false]
  resilience.singleflight [herdguard.singleflight.shared=false]
    resilience.l2 (client) [db.operation.name=HGET db.system.name=redis herdguard.cache.freshness=fresh herdguard.cache.hit=true]
`)
}

// TestTelemetry_tree_lockWinnerAndWaiter runs two pods on one Redis: the
// first takes the lock and loads, the second waits for its value.
func TestTelemetry_tree_lockWinnerAndWaiter(t *testing.T) {
	s := redistest.Start(t)
	rec := newTelRec(t)
	podA, podB := telPod(t, s, rec.tp, true), telPod(t, s, rec.tp, true)
	gate := make(chan struct{})
	loaderIn := make(chan struct{}, 1)
	slowLoad := func(ctx context.Context, key string) (string, error) {
		loaderIn <- struct{}{}
		select {
		case <-gate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return "v:" + key, nil
	}
	var winner trace.SpanContext
	var winRes Result[string]
	winDone := make(chan struct{})
	go func() {
		defer close(winDone)
		winner = rec.call("winner", func(ctx context.Context) {
			winRes, _ = podA.GetResult(ctx, "k", slowLoad)
		})
	}()
	select {
	case <-loaderIn:
	case <-time.After(10 * time.Second):
		t.Fatal("the winner's loader did not start")
	}
	var waitRes Result[string]
	var waitErr error
	waitDone := make(chan struct{})
	var waiter trace.SpanContext
	go func() {
		defer close(waitDone)
		waiter = rec.call("waiter", func(ctx context.Context) {
			waitRes, waitErr = podB.GetResult(ctx, "k", slowLoad)
		})
	}()
	// The waiter's first look at L2, under lock.wait, ends after it has
	// subscribed to the announcement: let the winner finish now.
	waitFor(t, func() bool {
		var wait trace.SpanID
		rec.mu.Lock()
		for _, st := range rec.started {
			if st.Name() == telemetry.SpanLockWait {
				wait = st.SpanContext().SpanID()
			}
		}
		rec.mu.Unlock()
		for _, sp := range rec.Ended() {
			if sp.Name() == telemetry.SpanL2 && wait.IsValid() && sp.Parent().SpanID() == wait {
				return true
			}
		}
		return false
	})
	close(gate)
	for _, ch := range []chan struct{}{winDone, waitDone} {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("a pod did not finish")
		}
	}
	if winRes.Source != SourceLoader || waitErr != nil || waitRes.Source != SourceWaited {
		t.Fatalf("winner source %v; waiter source %v, err %v; want loader, waited", winRes.Source, waitRes.Source, waitErr)
	}
	wantTree(t, rec.tree(t, winner), `
resilience.get [herdguard.failed_open=false herdguard.pipeline=tel herdguard.source=loader]
  resilience.l1 [herdguard.cache.freshness=miss herdguard.cache.hit=false]
  resilience.singleflight [herdguard.singleflight.shared=false]
    resilience.l2 (client) [db.operation.name=EVALSHA db.system.name=redis herdguard.cache.freshness=miss herdguard.cache.hit=false]
    resilience.lock [herdguard.lock.outcome=acquired]
      resilience.load [herdguard.attempt=1]
      resilience.writeback (client) [db.operation.name=EVALSHA db.system.name=redis]
`)
	lockSpan := rec.spansNamed(winner, telemetry.SpanLock)[0]
	fence, ok := attrOf(lockSpan, telemetry.LockFence)
	if !ok || fence.AsInt64() <= 0 {
		t.Fatalf("winner's lock span: fence = %v, %v; want a positive fence", fence.AsInt64(), ok)
	}
	wb := rec.spansNamed(winner, telemetry.SpanWriteBack)[0]
	if f, _ := attrOf(wb, telemetry.LockFence); f.AsInt64() != fence.AsInt64() {
		t.Fatalf("writeback fence = %d, want the lock's %d", f.AsInt64(), fence.AsInt64())
	}
	if _, ok := attrOf(lockSpan, telemetry.LockWaitMS); !ok {
		t.Fatal("winner's lock span has no lock wait")
	}

	wantTree(t, rec.tree(t, waiter), `
resilience.get [herdguard.failed_open=false herdguard.pipeline=tel herdguard.source=waited]
  resilience.l1 [herdguard.cache.freshness=miss herdguard.cache.hit=false]
  resilience.singleflight [herdguard.singleflight.shared=false]
    resilience.l2 (client) [db.operation.name=EVALSHA db.system.name=redis herdguard.cache.freshness=miss herdguard.cache.hit=false]
    resilience.lock [herdguard.lock.outcome=waited]
      resilience.lock.wait
        resilience.l2 (client) [db.operation.name=EVALSHA db.system.name=redis herdguard.cache.freshness=miss herdguard.cache.hit=false]
        resilience.l2 (client) [db.operation.name=HGET db.system.name=redis herdguard.cache.freshness=fresh herdguard.cache.hit=true]
`)
	waitLock := rec.spansNamed(waiter, telemetry.SpanLock)[0]
	if ms, ok := attrOf(waitLock, telemetry.LockWaitMS); !ok || ms.AsFloat64() <= 0 {
		t.Fatalf("waiter's lock wait = %v, %v; want positive", ms.AsFloat64(), ok)
	}
	if _, ok := attrOf(waitLock, telemetry.LockFence); ok {
		t.Fatal("a waiter holds no fence, but its lock span has one")
	}
}

// TestTelemetry_tree_coalescedJoiner checks that a caller that joins
// another's load links to the leader's single-flight span, which holds the
// load.
func TestTelemetry_tree_coalescedJoiner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newTelRec(t)
		p := build(t, New[string]("tel").Cache(time.Minute).SingleFlight().TracerProvider(rec.tp))
		const key = "k"
		c := &counter{gate: make(chan struct{})}
		var leader, joiner trace.SpanContext
		var lr, jr Result[string]
		var wg sync.WaitGroup
		wg.Go(func() {
			leader = rec.call("leader", func(ctx context.Context) { lr, _ = p.GetResult(ctx, key, c.load) })
		})
		synctest.Wait() // the leader's load is under way
		wg.Go(func() {
			joiner = rec.call("joiner", func(ctx context.Context) { jr, _ = p.GetResult(ctx, key, c.load) })
		})
		synctest.Wait() // the joiner waits for the leader's load
		close(c.gate)
		wg.Wait()
		if n := c.calls.Load(); n != 1 {
			t.Fatalf("%d loads, want 1 shared", n)
		}
		if lr.Source != SourceLoader || jr.Source != SourceCoalesced {
			t.Fatalf("leader source %v, joiner source %v; want loader, coalesced", lr.Source, jr.Source)
		}
		wantTree(t, rec.tree(t, leader), `
resilience.get [herdguard.failed_open=false herdguard.pipeline=tel herdguard.source=loader]
  resilience.l1 [herdguard.cache.freshness=miss herdguard.cache.hit=false]
  resilience.singleflight [herdguard.singleflight.shared=false]
    resilience.load [herdguard.attempt=1]
`)
		wantTree(t, rec.tree(t, joiner), `
resilience.get [herdguard.failed_open=false herdguard.pipeline=tel herdguard.source=coalesced]
  resilience.l1 [herdguard.cache.freshness=miss herdguard.cache.hit=false]
  resilience.singleflight [herdguard.singleflight.shared=true] links=1
`)
		lead := rec.spansNamed(leader, telemetry.SpanSingleFlight)[0]
		link := rec.spansNamed(joiner, telemetry.SpanSingleFlight)[0].Links()[0]
		if link.SpanContext.TraceID() != lead.SpanContext().TraceID() || link.SpanContext.SpanID() != lead.SpanContext().SpanID() {
			t.Fatalf("joiner links to %v, want the leader's single-flight span %v", link.SpanContext, lead.SpanContext())
		}
		load := rec.spansNamed(leader, telemetry.SpanLoad)[0]
		if load.Parent().SpanID() != lead.SpanContext().SpanID() {
			t.Fatal("the leader's load span is not under the linked single-flight span")
		}
	})
}

// TestTelemetry_tree_failOpen kills Redis: the call loads without L2 and
// without the lock, and says so.
func TestTelemetry_tree_failOpen(t *testing.T) {
	s := redistest.Start(t)
	rec := newTelRec(t)
	p := telPod(t, s, rec.tp, true)
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	root := rec.call("test", func(ctx context.Context) {
		r := telGet(t, ctx, p, "k", okLoad)
		if r.Source != SourceLoader || !r.FailedOpen {
			t.Fatalf("result %+v, want a loader value, failed open", r)
		}
	})
	wantTree(t, rec.tree(t, root), `
resilience.get [herdguard.failed_open=true herdguard.pipeline=tel herdguard.source=loader]
  resilience.l1 [herdguard.cache.freshness=miss herdguard.cache.hit=false]
  resilience.singleflight [herdguard.singleflight.shared=false]
    resilience.l2 (client) [db.operation.name=EVALSHA db.system.name=redis herdguard.cache.freshness=miss herdguard.cache.hit=false herdguard.fail_open.reason=redis_error herdguard.failed_open=true] events=[failed open]
    resilience.load [herdguard.attempt=1]
`)
}

var errLoad = errors.New("backend down")

func failLoad(context.Context, string) (string, error) { return "", errLoad }

// TestTelemetry_tree_stale serves a stale copy when the loader fails: the
// load span is an error, the call is not.
func TestTelemetry_tree_stale(t *testing.T) {
	rec := newTelRec(t)
	p := build(t, New[string]("tel").Cache(30*time.Millisecond).Jitter(0).Stale(time.Hour).SingleFlight().TracerProvider(rec.tp))
	telGet(t, context.Background(), p, "k", okLoad)
	waitFor(t, func() bool { _, f := p.l1.Lookup("k"); return f == cache.Stale })
	root := rec.call("test", func(ctx context.Context) {
		r := telGet(t, ctx, p, "k", failLoad)
		if r.Source != SourceStale || !errors.Is(r.Cause, errLoad) {
			t.Fatalf("result %+v, want stale with the loader's error as cause", r)
		}
	})
	wantTree(t, rec.tree(t, root), `
resilience.get [herdguard.failed_open=false herdguard.fallback.reason=error herdguard.fallback.used=true herdguard.pipeline=tel herdguard.source=stale] events=[fallback]
  resilience.l1 [herdguard.cache.freshness=stale herdguard.cache.hit=false]
  resilience.singleflight [herdguard.singleflight.shared=false]
    resilience.load [herdguard.attempt=1] events=[exception] status=Error
  resilience.fallback [herdguard.fallback.reason=error herdguard.source=stale]
`)
}

func TestTelemetry_tree_default(t *testing.T) {
	rec := newTelRec(t)
	p := build(t, New[string]("tel").Cache(time.Minute).SingleFlight().DefaultValue("dflt").TracerProvider(rec.tp))
	root := rec.call("test", func(ctx context.Context) {
		r := telGet(t, ctx, p, "k", failLoad)
		if r.Source != SourceDefault || r.Value != "dflt" {
			t.Fatalf("result %+v, want the default", r)
		}
	})
	wantTree(t, rec.tree(t, root), `
resilience.get [herdguard.failed_open=false herdguard.fallback.reason=error herdguard.fallback.used=true herdguard.pipeline=tel herdguard.source=default] events=[fallback]
  resilience.l1 [herdguard.cache.freshness=miss herdguard.cache.hit=false]
  resilience.singleflight [herdguard.singleflight.shared=false]
    resilience.load [herdguard.attempt=1] events=[exception] status=Error
  resilience.fallback [herdguard.fallback.reason=error herdguard.source=default]
`)
}

// TestTelemetry_tree_noFallback: with nothing to fall back on, the call's
// span is an error.
func TestTelemetry_tree_noFallback(t *testing.T) {
	rec := newTelRec(t)
	p := build(t, New[string]("tel").Cache(time.Minute).SingleFlight().TracerProvider(rec.tp))
	root := rec.call("test", func(ctx context.Context) {
		if _, err := p.GetResult(ctx, "k", failLoad); !errors.Is(err, errLoad) {
			t.Fatalf("err = %v, want %v", err, errLoad)
		}
	})
	wantTree(t, rec.tree(t, root), `
resilience.get [herdguard.failed_open=false herdguard.pipeline=tel herdguard.source=none] events=[exception] status=Error
  resilience.l1 [herdguard.cache.freshness=miss herdguard.cache.hit=false]
  resilience.singleflight [herdguard.singleflight.shared=false]
    resilience.load [herdguard.attempt=1] events=[exception] status=Error
  resilience.fallback [herdguard.fallback.reason=error herdguard.source=none]
`)
}

// TestTelemetry_tree_staleWhileRevalidate: the background refresh is a
// child of the call that served the stale copy.
func TestTelemetry_tree_staleWhileRevalidate(t *testing.T) {
	rec := newTelRec(t)
	p := build(t, New[string]("tel").Cache(30*time.Millisecond).Jitter(0).Stale(time.Hour).StaleWhileRevalidate().
		SingleFlight().TracerProvider(rec.tp))
	telGet(t, context.Background(), p, "k", okLoad)
	waitFor(t, func() bool { _, f := p.l1.Lookup("k"); return f == cache.Stale })
	root := rec.call("test", func(ctx context.Context) {
		if r := telGet(t, ctx, p, "k", okLoad); r.Source != SourceStale {
			t.Fatalf("source = %v, want stale", r.Source)
		}
	})
	waitFor(t, func() bool { return len(rec.spansNamed(root, telemetry.SpanRefresh)) == 1 })
	wantTree(t, rec.tree(t, root), `
resilience.get [herdguard.failed_open=false herdguard.pipeline=tel herdguard.source=stale]
  resilience.l1 [herdguard.cache.freshness=stale herdguard.cache.hit=false]
  resilience.refresh [herdguard.pipeline=tel]
    resilience.load [herdguard.attempt=1]
`)
}

// TestTelemetry_keys: keys stay off spans unless asked; hashed keys do not
// show the key.
func TestTelemetry_keys(t *testing.T) {
	const key = "user:secret@example.com"
	sum := sha256.Sum256([]byte(key))
	for _, tc := range []struct {
		mode telemetry.KeyMode
		want string // "" for none
	}{
		{telemetry.KeysOff, ""},
		{telemetry.KeysHashed, hex.EncodeToString(sum[:8])},
		{telemetry.KeysRaw, key},
	} {
		t.Run(fmt.Sprint(tc.mode), func(t *testing.T) {
			rec := newTelRec(t)
			p := build(t, New[string]("tel").Cache(time.Minute).SingleFlight().
				Telemetry(telemetry.Config{TracerProvider: rec.tp, Keys: tc.mode}))
			root := rec.call("test", func(ctx context.Context) { telGet(t, ctx, p, key, okLoad) })
			spans := rec.Ended()
			if len(spans) < 4 {
				t.Fatalf("%d spans, want at least 4", len(spans))
			}
			for _, s := range spans {
				for _, kv := range s.Attributes() {
					v := kv.Value.String()
					if kv.Key == telemetry.Key {
						if s.Name() != telemetry.SpanGet || v != tc.want {
							t.Fatalf("span %s: %s=%q, want only on %s, %q", s.Name(), kv.Key, v, telemetry.SpanGet, tc.want)
						}
						continue
					}
					if strings.Contains(v, "secret") {
						t.Fatalf("span %s: attribute %s shows the key: %q", s.Name(), kv.Key, v)
					}
				}
			}
			get := rec.spansNamed(root, telemetry.SpanGet)[0]
			v, ok := attrOf(get, telemetry.Key)
			if ok != (tc.want != "") || v.AsString() != tc.want {
				t.Fatalf("key attribute = %q (%v), want %q", v.AsString(), ok, tc.want)
			}
			if tc.mode == telemetry.KeysHashed && len(v.AsString()) != 16 {
				t.Fatalf("hashed key %q, want 16 hex digits", v.AsString())
			}
		})
	}
}

// TestTelemetry_providers: the explicit providers win over the globals; a
// no-op provider turns spans off; without one, the global is used.
func TestTelemetry_providers(t *testing.T) {
	t.Run("TracerProvider", func(t *testing.T) {
		rec := newTelRec(t)
		p := build(t, New[string]("tel").Cache(time.Minute).TracerProvider(rec.tp))
		telGet(t, context.Background(), p, "k", okLoad)
		if n := len(rec.Ended()); n == 0 {
			t.Fatal("no spans through Builder.TracerProvider")
		}
	})
	t.Run("Telemetry", func(t *testing.T) {
		rec := newTelRec(t)
		p := build(t, New[string]("tel").Cache(time.Minute).Telemetry(telemetry.Config{TracerProvider: rec.tp}))
		telGet(t, context.Background(), p, "k", okLoad)
		if n := len(rec.Ended()); n == 0 {
			t.Fatal("no spans through Builder.Telemetry")
		}
		if got := rec.Ended()[0].InstrumentationScope().Name; got != obs.Scope {
			t.Fatalf("scope = %q, want %q", got, obs.Scope)
		}
	})
	t.Run("noop", func(t *testing.T) {
		p := build(t, New[string]("tel").Cache(time.Minute).TracerProvider(tracenoop.NewTracerProvider()))
		if p.tel.Tracing() {
			t.Fatal("Tracing() with a no-op TracerProvider")
		}
	})
	t.Run("global", func(t *testing.T) {
		// Not parallel: it installs a global provider, and puts the old
		// one back. The global delegate forwards to the first provider
		// ever installed, so every run installs the same one.
		rec := globalRec()
		prev := otel.GetTracerProvider()
		before := build(t, New[string]("tel").Cache(time.Minute))
		explicit := newTelRec(t)
		pe := build(t, New[string]("tel").Cache(time.Minute).TracerProvider(explicit.tp))
		if prev == defaultGlobalTP && before.tel.Tracing() {
			t.Fatal("Tracing() before any SDK is installed")
		}
		otel.SetTracerProvider(rec.tp)
		defer otel.SetTracerProvider(prev)
		after := build(t, New[string]("tel").Cache(time.Minute))
		for name, p := range map[string]*Pipeline[string]{"built before": before, "built after": after} {
			if !p.tel.Tracing() {
				t.Fatalf("%s the SDK was installed: Tracing() is off", name)
			}
			root := rec.call("test", func(ctx context.Context) { telGet(t, ctx, p, "k", okLoad) })
			wantTree(t, rec.tree(t, root), `
resilience.get [herdguard.failed_open=false herdguard.pipeline=tel herdguard.source=loader]
  resilience.l1 [herdguard.cache.freshness=miss herdguard.cache.hit=false]
  resilience.load [herdguard.attempt=1]
`)
		}
		telGet(t, context.Background(), pe, "k", okLoad)
		if n := len(explicit.Ended()); n != 3 {
			t.Fatalf("explicit provider got %d spans, want 3 (get, l1, load)", n)
		}
	})
}

// TestTelemetry_providersAndConfig: Telemetry keeps a provider set by
// TracerProvider or MeterProvider that its Config leaves nil, in either
// order, and of two calls that set one provider the last wins.
func TestTelemetry_providersAndConfig(t *testing.T) {
	type recs struct {
		spans, other *telRec
		meter        *telMeter
	}
	cases := []struct {
		name  string
		build func(b *Builder[string], r recs) *Builder[string]
	}{
		{"providers then Telemetry", func(b *Builder[string], r recs) *Builder[string] {
			return b.TracerProvider(r.spans.tp).MeterProvider(r.meter.mp).Telemetry(telemetry.Config{HitSpans: true})
		}},
		{"Telemetry then providers", func(b *Builder[string], r recs) *Builder[string] {
			return b.Telemetry(telemetry.Config{HitSpans: true}).TracerProvider(r.spans.tp).MeterProvider(r.meter.mp)
		}},
		{"Telemetry's provider last", func(b *Builder[string], r recs) *Builder[string] {
			return b.TracerProvider(r.other.tp).MeterProvider(r.meter.mp).
				Telemetry(telemetry.Config{TracerProvider: r.spans.tp, HitSpans: true})
		}},
		{"TracerProvider last", func(b *Builder[string], r recs) *Builder[string] {
			return b.Telemetry(telemetry.Config{TracerProvider: r.other.tp, MeterProvider: r.meter.mp, HitSpans: true}).
				TracerProvider(r.spans.tp)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := recs{spans: newTelRec(t), other: newTelRec(t), meter: newTelMeter(t)}
			p := build(t, tc.build(New[string]("tel").Cache(time.Minute), r))
			telGet(t, context.Background(), p, "k", okLoad)
			telGet(t, context.Background(), p, "k", okLoad) // an L1 hit: spans only with HitSpans
			if n := len(r.spans.Ended()); n != 5 {
				t.Fatalf("provider set last got %d spans, want 5 (get, l1, load; get, l1)", n)
			}
			if n := len(r.other.Ended()); n != 0 {
				t.Fatalf("provider set first, then replaced, got %d spans", n)
			}
			got, _ := r.meter.collect(t)
			if len(got[telemetry.MetricCalls]) == 0 {
				t.Fatal("no calls counted: the MeterProvider was lost")
			}
		})
	}
}

// defaultGlobalTP is the global TracerProvider before any test installs one.
var defaultGlobalTP = otel.GetTracerProvider()

// globalRec is the one recorder tests install as the global provider.
var globalRec = sync.OnceValue(func() *telRec {
	r := &telRec{SpanRecorder: tracetest.NewSpanRecorder()}
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r))
	return r
})

// TestTelemetry_tree_breakerOpen: the load span says the breaker's state
// and that it refused the call; the default answers, reason breaker_open.
func TestTelemetry_tree_breakerOpen(t *testing.T) {
	rec := newTelRec(t)
	p := build(t, New[string]("tel").Cache(time.Minute).SingleFlight().DefaultValue("dflt").
		Breaker(breaker.Settings{Failures: 1, OpenTimeout: time.Hour}).TracerProvider(rec.tp))
	telGet(t, context.Background(), p, "k", failLoad) // opens the breaker
	root := rec.call("test", func(ctx context.Context) {
		if r := telGet(t, ctx, p, "k", okLoad); r.Source != SourceDefault {
			t.Fatalf("source = %v, want default", r.Source)
		}
	})
	wantTree(t, rec.tree(t, root), `
resilience.get [herdguard.failed_open=false herdguard.fallback.reason=breaker_open herdguard.fallback.used=true herdguard.pipeline=tel herdguard.source=default] events=[fallback]
  resilience.l1 [herdguard.cache.freshness=miss herdguard.cache.hit=false]
  resilience.singleflight [herdguard.singleflight.shared=false]
    resilience.load [herdguard.attempt=1 herdguard.breaker.state=open] events=[breaker refused the call]
  resilience.fallback [herdguard.fallback.reason=breaker_open herdguard.source=default]
`)
}
