package lock

import (
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/herdguard/herdguard/internal/redistest"
)

// srv is the package's private redis-server, started by TestMain. Tests use
// distinct namespaces so that they may run in parallel against it; tests
// that kill or pause Redis start their own server.
var srv *redistest.Server

// rdb is a client of srv, closed by srv's cleanup.
var rdb *redis.Client

func TestMain(m *testing.M) {
	s, closeFn, err := redistest.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv, rdb = s, s.Client()
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
