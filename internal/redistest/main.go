package redistest

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Main is a whole TestMain for a package that shares one private server:
// it starts the server, hands it to use (to keep it, and a client, in
// package variables), runs the tests, stops the server, checks for leaked
// goroutines after a passing run, and exits with the tests' code.
func Main(m *testing.M, use func(*Server)) {
	s, closeFn, err := New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	use(s)
	code := m.Run()
	closeFn()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// namespaces counts the namespaces handed out by Namespace.
var namespaces atomic.Int64

// Namespace returns a namespace for t's keys on a shared server that no
// other test uses, nor another run of t in this process (go test -count=N
// runs each test N times against the same server).
func Namespace(t testing.TB) string {
	return fmt.Sprintf("%s#%d", t.Name(), namespaces.Add(1))
}

// Context returns a context that bounds one test's Redis calls to d, and
// ends with the test.
func Context(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
