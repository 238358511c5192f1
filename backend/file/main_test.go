//go:build unix

package file

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the tests, or, when a test started this binary as a child
// process (childEnv set), the child's role.
func TestMain(m *testing.M) {
	if role, ok := os.LookupEnv(childEnv); ok {
		os.Exit(childMain(role))
	}
	goleak.VerifyTestMain(m)
}
