package resilience

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/keyring"
	"github.com/herdguard/herdguard/telemetry"
)

// testKey returns an AES-256 key whose secret is easy to spot in text.
func testKey(id uint32, seed byte) keyring.Key {
	b := make([]byte, 32)
	for i := range b {
		b[i] = 'a' + (seed+byte(i))%26
	}
	return keyring.Key{ID: id, Secret: b}
}

func mustRing(t *testing.T, primary keyring.Key, others ...keyring.Key) *keyring.Ring {
	t.Helper()
	r, err := keyring.New(primary, others...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// assertNoSecret fails t if text shows any of keys' secrets in a usual
// form.
func assertNoSecret(t *testing.T, what, text string, keys ...keyring.Key) {
	t.Helper()
	for _, k := range keys {
		for _, form := range []string{string(k.Secret), hex.EncodeToString(k.Secret), base64.StdEncoding.EncodeToString(k.Secret),
			strings.Trim(fmt.Sprint(k.Secret), "[]")} {
			if strings.Contains(text, form) {
				t.Fatalf("%s shows key %d's secret: %s", what, k.ID, text)
			}
		}
	}
}

// sdkTracerProvider records every span in rec.
func sdkTracerProvider(t *testing.T, rec *tracetest.SpanRecorder) *sdktrace.TracerProvider {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

// spansText is every name, attribute and event of the recorded spans.
func spansText(rec *tracetest.SpanRecorder) string {
	var b strings.Builder
	for _, s := range rec.Ended() {
		fmt.Fprintf(&b, "%s %v %v %v\n", s.Name(), s.Attributes(), s.Events(), s.Status())
	}
	return b.String()
}

// cryptPod is one process's pipeline named name on its own client of srv,
// sealing with ring (nil: in clear).
func cryptPod(t *testing.T, srv *redistest.Server, name string, ring *keyring.Ring, lockOn bool, more ...func(*Builder[string]) *Builder[string]) *Pipeline[string] {
	t.Helper()
	b := New[string](name).Cache(time.Minute).SingleFlight().
		Redis(srv.Client()).RedisOptions(RedisOptions{OpTimeout: time.Second, Encrypt: ring})
	if lockOn {
		b = b.Lock(LockSettings{})
	}
	for _, m := range more {
		b = m(b)
	}
	return build(t, b)
}

// TestEncrypt_podsShareSealedValues: what a pod writes is sealed in Redis,
// with the fields the scripts read in clear, and another pod with the
// keyring reads it as an L2 hit.
func TestEncrypt_podsShareSealedValues(t *testing.T) {
	srv := redistest.Start(t)
	ring := mustRing(t, testKey(7, 0))
	for _, lockOn := range []bool{false, true} {
		t.Run(fmt.Sprintf("lock=%v", lockOn), func(t *testing.T) {
			name := fmt.Sprintf("sealed-%v", lockOn)
			a, b := cryptPod(t, srv, name, ring, lockOn), cryptPod(t, srv, name, ring, lockOn)
			ctx := context.Background()
			load := func(context.Context, string) (string, error) { return "plaintext-value", nil }
			if r, err := a.GetResult(ctx, "k", load); err != nil || r.Source != SourceLoader {
				t.Fatalf("a: %+v, %v", r, err)
			}
			h, err := srv.Client().HGetAll(ctx, valueKey(t, name, "k")).Result()
			if err != nil {
				t.Fatal(err)
			}
			d := h[rkey.FieldData]
			if d == "" || d[0] != 0xE5 || strings.Contains(d, "plaintext-value") || h[rkey.FieldFence] == "" || h[rkey.FieldExpires] == "" {
				t.Fatalf("Redis holds %q: want the data sealed, the fence and expiry in clear", h)
			}
			if lockOn && h[rkey.FieldFence] == "0" {
				t.Fatalf("fence %s: the locked write-back lost its fence", h[rkey.FieldFence])
			}
			r, err := b.GetResult(ctx, "k", func(context.Context, string) (string, error) { return "", errors.New("not called") })
			if err != nil || r.Source != SourceL2 || r.Value != "plaintext-value" {
				t.Fatalf("b: %+v, %v; want the value from L2", r, err)
			}
		})
	}
}

// TestEncrypt_writesAndBatchesSealed: Set and GetMany write sealed
// values too, which another pod with the keyring reads as L2 hits.
func TestEncrypt_writesAndBatchesSealed(t *testing.T) {
	srv := redistest.Start(t)
	ring := mustRing(t, testKey(9, 1))
	a, b := cryptPod(t, srv, "sealed-writes", ring, true), cryptPod(t, srv, "sealed-writes", ring, true)
	ctx := context.Background()
	if err := a.Set(ctx, "set", "plaintext-set"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.GetMany(ctx, []string{"many"}, func(_ context.Context, keys []string) (map[string]string, error) {
		return map[string]string{"many": "plaintext-many"}, nil
	}); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"set": "plaintext-set", "many": "plaintext-many"} {
		d, err := srv.Client().HGet(ctx, valueKey(t, "sealed-writes", key), rkey.FieldData).Result()
		if err != nil || d == "" || d[0] != 0xE5 || strings.Contains(d, want) {
			t.Fatalf("%s: Redis holds %q, %v: want it sealed", key, d, err)
		}
		r, err := b.GetResult(ctx, key, func(context.Context, string) (string, error) { return "", errors.New("not called") })
		if err != nil || r.Source != SourceL2 || r.Value != want {
			t.Fatalf("%s from b: %+v, %v; want %q from L2", key, r, err, want)
		}
	}
}

// TestEncrypt_swappedValue_missCountedLogged copies the sealed bytes of
// key a onto key b with Redis's COPY: a pod reading b gets a miss and
// loads b's own value, never a's; the miss is counted with
// reason=decrypt_failed and logged, and neither logs nor spans show a key
// name or secret.
func TestEncrypt_swappedValue_missCountedLogged(t *testing.T) {
	srv := redistest.Start(t)
	key := testKey(7, 0)
	ring := mustRing(t, key)
	for _, lockOn := range []bool{false, true} {
		t.Run(fmt.Sprintf("lock=%v", lockOn), func(t *testing.T) {
			name := fmt.Sprintf("swap-%v", lockOn)
			ctx := context.Background()
			load := func(_ context.Context, k string) (string, error) { return "value of secret-key-" + k, nil }
			writer := cryptPod(t, srv, name, ring, lockOn)
			for _, k := range []string{"a", "b"} {
				if _, err := writer.Get(ctx, k, load); err != nil {
					t.Fatal(err)
				}
			}
			if err := srv.Client().Copy(ctx, valueKey(t, name, "a"), valueKey(t, name, "b"), 0, true).Err(); err != nil {
				t.Fatal(err)
			}
			m, rec, logs := newTelMeter(t), tracetest.NewSpanRecorder(), &syncBuffer{}
			tr := &transitions{}
			reader := cryptPod(t, srv, name, ring, lockOn, func(b *Builder[string]) *Builder[string] {
				return b.MeterProvider(m.mp).TracerProvider(sdkTracerProvider(t, rec)).
					Logger(slog.New(slog.NewTextHandler(logs, nil))).OnBreakerChange(tr.observe)
			})
			var loads atomic.Int64
			r, err := reader.GetResult(ctx, "b", func(ctx context.Context, k string) (string, error) {
				loads.Add(1)
				return load(ctx, k)
			})
			if err != nil || r.Source != SourceLoader || r.Value != "value of secret-key-b" || r.FailedOpen || loads.Load() != 1 {
				t.Fatalf("Get(b) = %+v, %v after %d loads; want b's own value, loaded once", r, err, loads.Load())
			}
			got, _ := m.collect(t)
			wantPoints(t, got, telemetry.MetricCorrupt, map[string]float64{"herdguard.pipeline=" + name + ",herdguard.reason=decrypt_failed,herdguard.tier=l2": 1})
			if n := reader.l2.Corrupted(); n != 1 {
				t.Fatalf("Corrupted() = %d, want 1", n)
			}
			log := logs.String()
			if strings.Count(log, "did not decrypt") != 1 || !strings.Contains(log, "key id 7: authentication failed") {
				t.Fatalf("log: want one line with the reason:\n%s", log)
			}
			if got := tr.String(); got != "" {
				t.Fatalf("breaker transitions %q: a value that does not open is no Redis failure", got)
			}
			// The reload replaced the moved bytes: b reads again.
			if r, err := cryptPod(t, srv, name, ring, lockOn).GetResult(ctx, "b", load); err != nil || r.Source != SourceL2 || r.Value != "value of secret-key-b" {
				t.Fatalf("after the reload: %+v, %v", r, err)
			}
			spans := spansText(rec)
			for _, text := range []string{log, spans} {
				assertNoSecret(t, "logs and spans", text, key)
				if strings.Contains(text, "secret-key") {
					t.Fatalf("a key's name or value shows:\n%s", text)
				}
			}
		})
	}
}

// TestEncrypt_rotationAcrossPods: pods a step apart in the rotation read
// each other's values; a pod that skipped the step that deploys the new
// key misses, and says so.
func TestEncrypt_rotationAcrossPods(t *testing.T) {
	srv := redistest.Start(t)
	ka, kb := testKey(1, 0), testKey(2, 5)
	ctx := context.Background()
	never := func(context.Context, string) (string, error) { return "", errors.New("loader called") }
	steps := []struct{ writer, reader *keyring.Ring }{
		{mustRing(t, ka), mustRing(t, ka, kb)},     // 1: B deployed as an opening key
		{mustRing(t, ka, kb), mustRing(t, ka)},     //    a pod not yet updated
		{mustRing(t, kb, ka), mustRing(t, ka, kb)}, // 2: B made primary
		{mustRing(t, ka, kb), mustRing(t, kb, ka)},
		{mustRing(t, kb), mustRing(t, kb, ka)}, // 3: A dropped
	}
	for i, s := range steps {
		key := fmt.Sprintf("k%d", i)
		w, r := cryptPod(t, srv, "rot", s.writer, true), cryptPod(t, srv, "rot", s.reader, true)
		if _, err := w.Get(ctx, key, okLoad); err != nil {
			t.Fatal(err)
		}
		if res, err := r.GetResult(ctx, key, never); err != nil || res.Source != SourceL2 {
			t.Fatalf("step %d: writer %v, reader %v: %+v, %v; want an L2 hit", i, s.writer, s.reader, res, err)
		}
	}
	// A pod still on A alone meets a value sealed by B: a miss, reloaded.
	w, r := cryptPod(t, srv, "rot", mustRing(t, kb, ka), true), cryptPod(t, srv, "rot", mustRing(t, ka), true)
	if _, err := w.Get(ctx, "skipped", okLoad); err != nil {
		t.Fatal(err)
	}
	res, err := r.GetResult(ctx, "skipped", okLoad)
	if err != nil || res.Source != SourceLoader || r.l2.Corrupted() == 0 {
		t.Fatalf("%+v, %v, Corrupted() = %d; want a miss, counted", res, err, r.l2.Corrupted())
	}
}

// TestEncrypt_clearAndSealedPods: a pod without encryption and one with it
// on the same pipeline name treat each other's values as misses; neither
// serves the other's bytes.
func TestEncrypt_clearAndSealedPods(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	clear, sealed := cryptPod(t, srv, "mixed", nil, false), cryptPod(t, srv, "mixed", mustRing(t, testKey(1, 0)), false)
	if _, err := clear.Get(ctx, "c", okLoad); err != nil {
		t.Fatal(err)
	}
	if _, err := sealed.Get(ctx, "s", okLoad); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		p   *Pipeline[string]
		key string
	}{{sealed, "c"}, {clear, "s"}} {
		r, err := c.p.GetResult(ctx, c.key, okLoad)
		if err != nil || r.Source != SourceLoader || r.Value != "v:"+c.key || c.p.l2.Corrupted() != 1 {
			t.Fatalf("%s: %+v, %v, Corrupted() = %d; want a miss, reloaded, counted", c.key, r, err, c.p.l2.Corrupted())
		}
	}
}

func TestEncrypt_config(t *testing.T) {
	srv := redistest.Start(t)
	_, err := New[string]("cfg").Cache(time.Minute).Redis(srv.Client()).
		RedisOptions(RedisOptions{Encrypt: &keyring.Ring{}}).Build()
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "RedisOptions" || !strings.Contains(ce.Problem, "keyring.New") {
		t.Fatalf("Build() error = %v; want a *ConfigError on RedisOptions about the keyring", err)
	}
	k := testKey(3, 1)
	o := RedisOptions{Prefix: "app:", Encrypt: mustRing(t, k)}
	var text bytes.Buffer
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x"} {
		fmt.Fprintf(&text, verb+"\n", o)
		fmt.Fprintf(&text, verb+"\n", &o)
	}
	slog.New(slog.NewJSONHandler(&text, nil)).Info("options", "redis", o)
	assertNoSecret(t, "the options", text.String(), k)
	if !strings.Contains(text.String(), "primary: 3") {
		t.Fatalf("the options do not show the key id:\n%s", text.String())
	}
}
