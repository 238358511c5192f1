package rcache

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/redistest"
)

// srv is the package's private redis-server, started by TestMain. Tests use
// distinct namespaces so that they may run in parallel against it.
var srv *redistest.Server

// rdb is a client of srv, closed by srv's cleanup.
var rdb *redis.Client

func TestMain(m *testing.M) {
	redistest.Main(m, func(s *redistest.Server) { srv, rdb = s, s.Client() })
}
