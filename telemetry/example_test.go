package telemetry_test

import (
	"fmt"

	"github.com/herdguard/herdguard/telemetry"
)

// ExampleConfig shows the key policies: keys stay off spans unless asked,
// and may go on hashed, so that spans of one key can be found together
// without revealing it.
func ExampleConfig() {
	for _, keys := range []telemetry.KeyMode{telemetry.KeysOff, telemetry.KeysHashed, telemetry.KeysRaw} {
		tel, err := telemetry.New("example.com/users", "v1.0.0", "users", telemetry.Config{Keys: keys})
		if err != nil {
			panic(err)
		}
		if kv, ok := tel.KeyAttr("user:42"); ok {
			fmt.Println("key on spans:", kv.Value.Emit())
		} else {
			fmt.Println("key off spans")
		}
	}
	// Output:
	// key off spans
	// key on spans: ea3fd43be1e57d62
	// key on spans: user:42
}
