package crosspod_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the tests, or, when the parent started this binary as a
// pod (podEnv set), the pod.
func TestMain(m *testing.M) {
	if cfg, ok := os.LookupEnv(podEnv); ok {
		os.Exit(podMain(cfg))
	}
	goleak.VerifyTestMain(m)
}
