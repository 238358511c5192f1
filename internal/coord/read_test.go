package coord

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/backend/backendtest"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/obs"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/telemetry"
)

// readRig is what a test of the plain reads sees of an adapter: its
// spans, its metrics, and the failures it recorded as failing open
// ("op" for each, "op+span" when it was given its span).
type readRig struct {
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	opens  []string
	errs   []error
}

// newReadRig is the rig and the Deps that feed it.
func newReadRig(t *testing.T) (*readRig, Deps[string]) {
	t.Helper()
	r := &readRig{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	tel, err := obs.New(obs.Scope, obs.Version(), "read", telemetry.Config{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	d := Deps[string]{Tel: tel, FailOpen: func(_ context.Context, sp trace.Span, op string, err error) {
		if sp != nil {
			op += "+span"
		}
		r.opens, r.errs = append(r.opens, op), append(r.errs, err)
	}}
	return r, d
}

// lastL2 is the attributes of the last L2 span ended, which must be a
// client span.
func (r *readRig) lastL2(t *testing.T) map[attribute.Key]attribute.Value {
	t.Helper()
	ended := r.spans.Ended()
	for i := len(ended) - 1; i >= 0; i-- {
		if s := ended[i]; s.Name() == telemetry.SpanL2 {
			if s.SpanKind() != trace.SpanKindClient {
				t.Fatalf("L2 span of kind %v, want client", s.SpanKind())
			}
			as := map[attribute.Key]attribute.Value{}
			for _, kv := range s.Attributes() {
				as[kv.Key] = kv.Value
			}
			return as
		}
	}
	t.Fatal("no L2 span ended")
	return nil
}

// wantAttrs fails the test unless as holds want (as "key=value").
func wantAttrs(t *testing.T, what string, as map[attribute.Key]attribute.Value, want ...attribute.KeyValue) {
	t.Helper()
	for _, kv := range want {
		if got, ok := as[kv.Key]; !ok || got != kv.Value {
			t.Errorf("%s: %s = %v, want %v (span attributes %v)", what, kv.Key, got.String(), kv.Value.String(), as)
		}
	}
}

// corrupt is the count of corrupt entries of L2.
func (r *readRig) corrupt(t *testing.T) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == telemetry.MetricCorrupt {
				for _, dp := range s.DataPoints {
					n += dp.Value
				}
			}
		}
	}
	return n
}

// dataFault is a store whose reads of key find a problem with its data.
type dataFault struct {
	Store[string]
	key string
}

var errUnusable = fmt.Errorf("a row this module did not write: %w", cache.ErrCodec)

func (s dataFault) Get(ctx context.Context, key string) (rcache.Entry[string], cache.Freshness, error) {
	if key == s.key {
		return rcache.Entry[string]{}, cache.Miss, errUnusable
	}
	return s.Store.Get(ctx, key)
}

func (s dataFault) GetMany(ctx context.Context, keys []string) ([]rcache.Got[string], error) {
	gs, err := s.Store.GetMany(ctx, keys)
	for i, k := range keys {
		if err == nil && k == s.key {
			gs[i] = rcache.Got[string]{Err: errUnusable}
		}
	}
	return gs, err
}

// wantLooks fails the test unless looks are, key by key, plain reads (no
// lease, no error) that found the values want names ("" a miss).
func wantLooks(t *testing.T, what string, looks []Look[string], want ...string) {
	t.Helper()
	if len(looks) != len(want) {
		t.Fatalf("%s: %d looks, want %d", what, len(looks), len(want))
	}
	for i, lk := range looks {
		f := cache.Fresh
		if want[i] == "" {
			f = cache.Miss
		}
		if lk.E.Value != want[i] || lk.F != f || lk.Lease != nil || lk.Err != nil || lk.G != nil {
			t.Errorf("%s: look %d = %+v, want %q (%v), no lease, no error", what, i, lk, want[i], f)
		}
	}
}

// TestRead_redis: over Redis, Read and ReadMany read L2 with one client
// span each (HGET, what it found, the batch's size); a key's data problem
// is a miss, counted as a corrupt entry, failing nothing open; a Redis
// that is gone fails the read, recorded as failing open (l2_get).
func TestRead_redis(t *testing.T) {
	srv := redistest.Start(t)
	ctx := redistest.Context(t, 30*time.Second)
	r, d := newReadRig(t)
	w, err := WireRedis(Options{Client: srv.Client(), Prefix: "hg:", Namespace: "read", OpTimeout: time.Second,
		Breaker: newBreaker(t, "redis"), Hooks: newHeard().hooks()}, d)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(t, w)
	if _, err := w.L2.Set(ctx, "k", testEntry("v")); err != nil {
		t.Fatal(err)
	}
	redisOp := []attribute.KeyValue{telemetry.DBSystemRedis, telemetry.DBOperationName.String("HGET")}

	e, f, err := w.Coord.Read(ctx, "k")
	if err != nil || e.Value != "v" || f != cache.Fresh {
		t.Fatalf("Read(k) = %+v, %v, %v; want v, fresh", e, f, err)
	}
	wantAttrs(t, "hit", r.lastL2(t), append(redisOp, telemetry.Hit.Bool(true), telemetry.Freshness.String("fresh"))...)
	if _, f, err := w.Coord.Read(ctx, "none"); err != nil || f != cache.Miss {
		t.Fatalf("Read(none) = %v, %v; want a miss", f, err)
	}
	wantAttrs(t, "miss", r.lastL2(t), append(redisOp, telemetry.Hit.Bool(false), telemetry.Freshness.String("miss"))...)
	looks, err := w.Coord.ReadMany(ctx, []string{"k", "none"})
	if err != nil {
		t.Fatal(err)
	}
	wantLooks(t, "ReadMany", looks, "v", "")
	wantAttrs(t, "batch", r.lastL2(t), append(redisOp, attrKeys.Int(2))...)

	c := w.Coord.(*redisCoord[string])
	store := c.d.Store
	c.d.Store = dataFault{Store: store, key: "k"}
	if _, f, err := w.Coord.Read(ctx, "k"); err != nil || f != cache.Miss {
		t.Fatalf("Read of bad data = %v, %v; want a miss", f, err)
	}
	if n := r.corrupt(t); n != 1 {
		t.Fatalf("%d corrupt entries after a key's read of bad data, want 1", n)
	}
	looks, err = w.Coord.ReadMany(ctx, []string{"none", "k"})
	if err != nil {
		t.Fatalf("ReadMany with a key's bad data: %v, want its looks", err)
	}
	wantLooks(t, "ReadMany with a key's bad data", looks, "", "")
	if n := r.corrupt(t); n != 2 || len(r.opens) != 0 {
		t.Fatalf("%d corrupt entries, failing open %v; want 2, none", n, r.opens)
	}
	c.d.Store = store

	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.Coord.Read(ctx, "k"); err == nil || Classify(ctx, err) != Infra {
		t.Fatalf("Read with Redis gone: %v, want its failure", err)
	}
	if looks, err := w.Coord.ReadMany(ctx, []string{"k", "none"}); err == nil || looks != nil {
		t.Fatalf("ReadMany with Redis gone: %v, %v; want no looks, its failure", looks, err)
	}
	if fmt.Sprint(r.opens) != "[l2_get+span l2_get+span]" {
		t.Fatalf("failing open recorded %v, want l2_get twice, on the span", r.opens)
	}
}

// faultyReads is a backend over m whose views' reads (Load) find bad
// data at key bad, and fail while down.
type faultyReads struct {
	m    *backendtest.Memory
	bad  string
	down *atomic.Bool
}

var errDown = errors.New("the database is down")

func (b faultyReads) Open(s backend.Scope) (backend.Shared, error) {
	sh, err := b.m.Open(s)
	if err != nil {
		return nil, err
	}
	return faultyView{Shared: sh, b: b}, nil
}

type faultyView struct {
	backend.Shared
	b faultyReads
}

func (v faultyView) System() string { return "memory" }

func (v faultyView) Load(ctx context.Context, key string) ([]byte, error) {
	switch {
	case v.b.down.Load():
		return nil, errDown
	case key == v.b.bad:
		return nil, fmt.Errorf("the row of %s: %w", key, cache.ErrCodec)
	}
	return v.Shared.Load(ctx, key)
}

// TestRead_backend: over a backend, Read and ReadMany read L2 with one
// client span each (the backend's system, Load, what it found, the
// batch's size); a key's data problem is a miss to Read, counted as a
// corrupt entry; a backend that fails fails the read, recorded as
// failing open (l2_get).
func TestRead_backend(t *testing.T) {
	ctx := context.Background()
	r, d := newReadRig(t)
	b := faultyReads{m: new(backendtest.Memory), bad: "bad", down: new(atomic.Bool)}
	w, err := WireBackend(Options{Backend: b, Namespace: "read", OpTimeout: time.Second,
		Breaker: newBreaker(t, "backend"), Hooks: newHeard().hooks()}, d)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(t, w)
	if _, err := w.L2.Set(ctx, "k", testEntry("v")); err != nil {
		t.Fatal(err)
	}
	op := []attribute.KeyValue{telemetry.DBSystemName.String("memory"), telemetry.DBOperationName.String("Load")}

	e, f, err := w.Coord.Read(ctx, "k")
	if err != nil || e.Value != "v" || f != cache.Fresh {
		t.Fatalf("Read(k) = %+v, %v, %v; want v, fresh", e, f, err)
	}
	wantAttrs(t, "hit", r.lastL2(t), append(op, telemetry.Hit.Bool(true), telemetry.Freshness.String("fresh"))...)
	looks, err := w.Coord.ReadMany(ctx, []string{"none", "k"})
	if err != nil {
		t.Fatal(err)
	}
	wantLooks(t, "ReadMany", looks, "", "v")
	wantAttrs(t, "batch", r.lastL2(t), append(op, attrKeys.Int(2))...)
	if _, f, err := w.Coord.Read(ctx, "bad"); err != nil || f != cache.Miss {
		t.Fatalf("Read of bad data = %v, %v; want a miss", f, err)
	}
	wantAttrs(t, "bad data", r.lastL2(t), telemetry.Hit.Bool(false), telemetry.Freshness.String("miss"))
	if n := r.corrupt(t); n != 1 || len(r.opens) != 0 {
		t.Fatalf("%d corrupt entries, failing open %v; want 1, none", n, r.opens)
	}

	b.down.Store(true)
	if _, _, err := w.Coord.Read(ctx, "k"); !errors.Is(err, errDown) {
		t.Fatalf("Read with the backend down: %v, want its failure", err)
	}
	if looks, err := w.Coord.ReadMany(ctx, []string{"k"}); !errors.Is(err, errDown) || looks != nil {
		t.Fatalf("ReadMany with the backend down: %v, %v; want no looks, its failure", looks, err)
	}
	if fmt.Sprint(r.opens) != "[l2_get+span l2_get+span]" {
		t.Fatalf("failing open recorded %v, want l2_get twice, on the span", r.opens)
	}
}

// TestRead_memory: the embedded default's reads look at L1.
func TestRead_memory(t *testing.T) {
	ctx := context.Background()
	l1 := rcache.NewMemory[string](rcache.MemoryOptions{})
	l1.Set("k", testEntry("v"))
	w := WireMemory(Deps[string]{}, l1)
	if e, f, err := w.Coord.Read(ctx, "k"); err != nil || e.Value != "v" || f != cache.Fresh {
		t.Fatalf("Read(k) = %+v, %v, %v; want v, fresh", e, f, err)
	}
	if _, f, err := w.Coord.Read(ctx, "none"); err != nil || f != cache.Miss {
		t.Fatalf("Read(none) = %v, %v; want a miss", f, err)
	}
	looks, err := w.Coord.ReadMany(ctx, []string{"none", "k"})
	if err != nil {
		t.Fatal(err)
	}
	wantLooks(t, "ReadMany", looks, "", "v")
}
