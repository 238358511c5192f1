package obs

import (
	"context"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/herdguard/herdguard/telemetry"
)

func TestNew_explicitProviders(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	cases := []struct {
		name    string
		c       telemetry.Config
		tracing bool
	}{
		{"sdk", telemetry.Config{TracerProvider: tp, MeterProvider: metricnoop.NewMeterProvider()}, true},
		{"noop", telemetry.Config{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: metricnoop.NewMeterProvider()}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tel, err := New("scope", "v", "p", tc.c)
			if err != nil {
				t.Fatal(err)
			}
			if tel.Tracing() != tc.tracing || tel.Metering() {
				t.Fatalf("Tracing=%v Metering=%v, want %v false", tel.Tracing(), tel.Metering(), tc.tracing)
			}
			_, sp := tel.Start(context.Background(), telemetry.SpanGet)
			if (sp != nil) != tc.tracing {
				t.Fatalf("span %v, want one only when tracing", sp)
			}
			if sp != nil {
				sp.End()
			}
		})
	}
	if n := len(rec.Ended()); n != 1 {
		t.Fatalf("recorded %d spans, want 1", n)
	}
}

func TestNew_globalDefaultIsOff(t *testing.T) {
	tel, err := New("scope", "v", "p", telemetry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if tel.Tracing() || tel.Metering() {
		t.Fatal("with no SDK installed, telemetry must report off")
	}
}

func TestKeyAttr(t *testing.T) {
	cases := []struct {
		mode telemetry.KeyMode
		ok   bool
		want string
	}{
		{telemetry.KeysOff, false, ""},
		{telemetry.KeysRaw, true, "user:42"},
		{telemetry.KeysHashed, true, "ea3fd43be1e57d62"}, // printf user:42 | sha256sum | cut -c1-16
	}
	for _, tc := range cases {
		tel, err := New("scope", "v", "p", telemetry.Config{Keys: tc.mode})
		if err != nil {
			t.Fatal(err)
		}
		kv, ok := tel.KeyAttr("user:42")
		if ok != tc.ok || (ok && kv.Value.AsString() != tc.want) {
			t.Errorf("mode %d: got %v %q, want %v %q", tc.mode, ok, kv.Value.AsString(), tc.ok, tc.want)
		}
	}
}

// TestVersion: the module's own tests run a "(devel)" build of it, and
// its spans report that version under the scope they were given.
func TestVersion(t *testing.T) {
	if v := Version(); v != "(devel)" {
		t.Fatalf("Version() = %q in the module's own test, want (devel)", v)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tel, err := New(Scope, Version(), "p", telemetry.Config{TracerProvider: tp, MeterProvider: metricnoop.NewMeterProvider()})
	if err != nil {
		t.Fatal(err)
	}
	_, sp := tel.Start(context.Background(), telemetry.SpanGet)
	sp.End()
	if got := rec.Ended()[0].InstrumentationScope(); got.Name != Scope || got.Version != "(devel)" {
		t.Fatalf("span scope %q %q, want %q (devel)", got.Name, got.Version, Scope)
	}
}
