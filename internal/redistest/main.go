package redistest

import (
	"fmt"
	"os"
	"testing"

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
