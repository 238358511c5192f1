package telemetry_test

import (
	"context"
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/herdguard/herdguard/resilience"
	"github.com/herdguard/herdguard/telemetry"
)

// ExampleConfig shows the key policies: keys stay off spans unless asked,
// and may go on hashed, so that spans of one key can be found together
// without revealing it.
func ExampleConfig() {
	for _, keys := range []telemetry.KeyMode{telemetry.KeysOff, telemetry.KeysHashed, telemetry.KeysRaw} {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		users, err := resilience.New[string]("users").
			Telemetry(telemetry.Config{TracerProvider: tp, Keys: keys}).
			Build()
		if err != nil {
			panic(err)
		}
		_, _ = users.Get(context.Background(), "user:42", func(context.Context, string) (string, error) { return "Ada", nil })
		_ = users.Close()
		shown := "key off spans"
		for _, sp := range rec.Ended() {
			for _, kv := range sp.Attributes() {
				if sp.Name() == telemetry.SpanGet && kv.Key == telemetry.Key {
					shown = "key on spans: " + kv.Value.AsString()
				}
			}
		}
		fmt.Println(shown)
	}
	// Output:
	// key off spans
	// key on spans: ea3fd43be1e57d62
	// key on spans: user:42
}
