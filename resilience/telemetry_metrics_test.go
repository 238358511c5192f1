package resilience

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/internal/obs"
	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/telemetry"
)

// telMeter is an SDK MeterProvider read by hand.
type telMeter struct {
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newTelMeter(t *testing.T) *telMeter {
	t.Helper()
	m := &telMeter{reader: sdkmetric.NewManualReader()}
	m.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(m.reader))
	t.Cleanup(func() { _ = m.mp.Shutdown(context.Background()) })
	return m
}

// point is one data point: a counter's or gauge's value, a histogram's
// count and sum.
type point struct {
	value float64
	count uint64
}

// collect returns, for each metric name, its data points by attribute set
// ("k=v,k=v", sorted), and each metric's unit.
func (m *telMeter) collect(t *testing.T) (map[string]map[string]point, map[string]string) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]point{}
	units := map[string]string{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != obs.Scope {
			t.Fatalf("scope %q, want %q", sm.Scope.Name, obs.Scope)
		}
		for _, mt := range sm.Metrics {
			pts := map[string]point{}
			units[mt.Name] = mt.Unit
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					pts[attrString(dp.Attributes)] = point{value: float64(dp.Value)}
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					pts[attrString(dp.Attributes)] = point{value: float64(dp.Value)}
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					pts[attrString(dp.Attributes)] = point{value: dp.Sum, count: dp.Count}
				}
			default:
				t.Fatalf("metric %s: unexpected data %T", mt.Name, mt.Data)
			}
			out[mt.Name] = pts
		}
	}
	return out, units
}

func attrString(s attribute.Set) string {
	var parts []string
	for _, kv := range s.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// wantPoints checks a counter's or gauge's points exactly.
func wantPoints(t *testing.T, got map[string]map[string]point, name string, want map[string]float64) {
	t.Helper()
	pts := got[name]
	if len(pts) != len(want) {
		t.Fatalf("%s: %d points %v, want %v", name, len(pts), pts, want)
	}
	for attrs, v := range want {
		if p, ok := pts[attrs]; !ok || p.value != v {
			t.Fatalf("%s{%s} = %v (present %v), want %v; all: %v", name, attrs, p.value, ok, v, pts)
		}
	}
}

// wantCounts checks a histogram's point counts exactly.
func wantCounts(t *testing.T, got map[string]map[string]point, name string, want map[string]uint64) {
	t.Helper()
	pts := got[name]
	if len(pts) != len(want) {
		t.Fatalf("%s: %d points %v, want %v", name, len(pts), pts, want)
	}
	for attrs, n := range want {
		if p, ok := pts[attrs]; !ok || p.count != n || p.value < 0 {
			t.Fatalf("%s{%s} count = %d (present %v, sum %v), want %d; all: %v", name, attrs, p.count, ok, p.value, n, pts)
		}
	}
}

func TestMetrics_callsAndLoads(t *testing.T) {
	m := newTelMeter(t)
	p := build(t, New[string]("m").Cache(time.Minute).SingleFlight().Lock(LockSettings{}).MeterProvider(m.mp))
	telGet(t, context.Background(), p, "k", okLoad)
	telGet(t, context.Background(), p, "k", okLoad)
	telGet(t, context.Background(), p, "k", okLoad)
	if _, err := p.GetResult(context.Background(), "gone", func(context.Context, string) (string, error) { return "", ErrNotFound }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	got, units := m.collect(t)
	wantPoints(t, got, telemetry.MetricCalls, map[string]float64{
		"herdguard.failed_open=false,herdguard.pipeline=m,herdguard.source=loader": 2,
		"herdguard.failed_open=false,herdguard.pipeline=m,herdguard.source=l1":     2,
	})
	wantPoints(t, got, telemetry.MetricLoads, map[string]float64{
		"herdguard.outcome=ok,herdguard.pipeline=m":        1,
		"herdguard.outcome=not_found,herdguard.pipeline=m": 1,
	})
	wantCounts(t, got, telemetry.MetricLoadDuration, map[string]uint64{
		"herdguard.outcome=ok,herdguard.pipeline=m":        1,
		"herdguard.outcome=not_found,herdguard.pipeline=m": 1,
	})
	wantCounts(t, got, telemetry.MetricLockWait, map[string]uint64{
		"herdguard.lock.outcome=acquired,herdguard.pipeline=m": 2,
	})
	for name, unit := range map[string]string{
		telemetry.MetricCalls: "{call}", telemetry.MetricLoads: "{call}",
		telemetry.MetricLoadDuration: "s", telemetry.MetricLockWait: "s",
	} {
		if units[name] != unit {
			t.Fatalf("%s: unit %q, want %q", name, units[name], unit)
		}
	}
	for _, name := range []string{telemetry.MetricFailOpens, telemetry.MetricFallbacks, telemetry.MetricBreakerState} {
		if len(got[name]) != 0 {
			t.Fatalf("%s: %v, want nothing", name, got[name])
		}
	}
}

// TestMetrics_lockWaitAcrossPods: a waiter's wait is recorded as waited.
func TestMetrics_lockWaitAcrossPods(t *testing.T) {
	s := redistest.Start(t)
	m := newTelMeter(t)
	// A generous OpTimeout: a Redis slow to answer on a loaded machine
	// must not make a pod fail open and load on its own.
	pod := func() *Builder[string] {
		return New[string]("m").Cache(time.Minute).Lock(LockSettings{Poll: 20 * time.Millisecond}).
			Redis(s.Client()).RedisOptions(RedisOptions{OpTimeout: 10 * time.Second}).MeterProvider(m.mp)
	}
	rec := newTelRec(t) // podB's spans show when its wait is under way
	podA, podB := build(t, pod()), build(t, pod().TracerProvider(rec.tp))
	c := &counter{gate: make(chan struct{})}
	done := make(chan Result[string], 2)
	go func() { r, _ := podA.GetResult(context.Background(), "k", c.load); done <- r }()
	waitFor(t, func() bool { return c.calls.Load() == 1 })
	go func() { r, _ := podB.GetResult(context.Background(), "k", c.load); done <- r }()
	// Once its lock wait has started, the waiter is woken by the winner's
	// announcement: let the winner finish.
	waitFor(t, func() bool { return rec.startedNamed(telemetry.SpanLockWait) == 1 })
	close(c.gate)
	srcs := map[Source]int{}
	for range 2 {
		select {
		case r := <-done:
			srcs[r.Source]++
		case <-time.After(10 * time.Second):
			t.Fatal("a pod did not finish")
		}
	}
	if srcs[SourceLoader] != 1 || srcs[SourceWaited] != 1 {
		t.Fatalf("sources %v, want one loader, one waited", srcs)
	}
	got, _ := m.collect(t)
	wantCounts(t, got, telemetry.MetricLockWait, map[string]uint64{
		"herdguard.lock.outcome=acquired,herdguard.pipeline=m": 1,
		"herdguard.lock.outcome=waited,herdguard.pipeline=m":   1,
	})
	if p := got[telemetry.MetricLockWait]["herdguard.lock.outcome=waited,herdguard.pipeline=m"]; p.value <= 0 {
		t.Fatalf("waited lock wait sum = %v s, want positive", p.value)
	}
}

func TestMetrics_failOpen(t *testing.T) {
	s := redistest.Start(t)
	m := newTelMeter(t)
	p := build(t, New[string]("m").Cache(time.Minute).SingleFlight().Lock(LockSettings{}).
		Redis(s.Client()).RedisOptions(RedisOptions{OpTimeout: 500 * time.Millisecond}).MeterProvider(m.mp))
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if r := telGet(t, context.Background(), p, "k", okLoad); !r.FailedOpen {
		t.Fatalf("result %+v, want failed open", r)
	}
	got, _ := m.collect(t)
	wantPoints(t, got, telemetry.MetricFailOpens, map[string]float64{
		"herdguard.pipeline=m,herdguard.reason=l2_get:redis_error": 1,
	})
	// Unlocked with Lock on: it may duplicate another process's load.
	wantPoints(t, got, telemetry.MetricDuplicateLoads, map[string]float64{
		"herdguard.pipeline=m,herdguard.reason=fail_open": 1,
	})
	wantPoints(t, got, telemetry.MetricCalls, map[string]float64{
		"herdguard.failed_open=true,herdguard.pipeline=m,herdguard.source=loader": 1,
	})
}

// TestMetrics_fallbacksAndBreaker: fallbacks by reason, and the breaker's
// state as it opens.
func TestMetrics_fallbacksAndBreaker(t *testing.T) {
	m := newTelMeter(t)
	p := build(t, New[string]("m").Cache(time.Minute).SingleFlight().DefaultValue("dflt").
		Breaker(breaker.Settings{Name: "loader-br", Failures: 2, OpenTimeout: time.Hour}).
		Timeout(20*time.Millisecond).MeterProvider(m.mp))
	block := func(ctx context.Context, _ string) (string, error) { <-ctx.Done(); return "", ctx.Err() }
	for i, tc := range []struct {
		load LoadFunc[string]
		want string
	}{{failLoad, "error"}, {block, "timeout"}, {failLoad, "breaker_open"}} {
		r := telGet(t, context.Background(), p, "k", tc.load)
		if r.Source != SourceDefault || reason(r.Cause) != tc.want {
			t.Fatalf("call %d: source %v, cause %v; want default for %s", i, r.Source, r.Cause, tc.want)
		}
	}
	got, _ := m.collect(t)
	wantPoints(t, got, telemetry.MetricFallbacks, map[string]float64{
		"herdguard.pipeline=m,herdguard.reason=error,herdguard.source=default":        1,
		"herdguard.pipeline=m,herdguard.reason=timeout,herdguard.source=default":      1,
		"herdguard.pipeline=m,herdguard.reason=breaker_open,herdguard.source=default": 1,
	})
	wantPoints(t, got, telemetry.MetricCalls, map[string]float64{
		"herdguard.failed_open=false,herdguard.pipeline=m,herdguard.source=default": 3,
	})
	wantPoints(t, got, telemetry.MetricBreakerState, map[string]float64{
		"herdguard.breaker.name=loader-br,herdguard.pipeline=m": float64(breaker.Open),
	})
	// The breaker refused the third call: no loader ran.
	wantPoints(t, got, telemetry.MetricLoads, map[string]float64{
		"herdguard.outcome=error,herdguard.pipeline=m":   1,
		"herdguard.outcome=timeout,herdguard.pipeline=m": 1,
	})
}

// TestMetrics_providers: metrics alone (no tracing) are recorded; a no-op
// MeterProvider turns them off.
func TestMetrics_providers(t *testing.T) {
	m := newTelMeter(t)
	p := build(t, New[string]("m").Cache(time.Minute).Telemetry(telemetry.Config{MeterProvider: m.mp}))
	if !p.tel.Metering() {
		t.Fatal("Metering() is off with an SDK MeterProvider")
	}
	telGet(t, context.Background(), p, "k", okLoad)
	got, _ := m.collect(t)
	wantPoints(t, got, telemetry.MetricCalls, map[string]float64{
		"herdguard.failed_open=false,herdguard.pipeline=m,herdguard.source=loader": 1,
	})
	off := build(t, New[string]("m").Cache(time.Minute).MeterProvider(metricnoop.NewMeterProvider()))
	if off.tel.Metering() {
		t.Fatal("Metering() with a no-op MeterProvider")
	}
}
