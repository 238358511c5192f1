package jaegere2e

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs a pod when the test binary is started as one (see runPod),
// and the tests otherwise.
func TestMain(m *testing.M) {
	if os.Getenv(podEnv) != "" {
		os.Exit(runPod())
	}
	goleak.VerifyTestMain(m)
}
