package bench

import (
	"context"
	"os"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/redistest"
)

// rotateEnv names the environment variable that rotates the order in which
// a benchmark runs its contenders: with n, the contender at index n (modulo
// their number) runs first. The runner in ../benchcmp sets it to the round
// number, so that no contender always runs first in its process.
const rotateEnv = "HERDGUARD_BENCH_ROTATE"

// contender is one library's way through a path, run as a sub-benchmark.
type contender struct {
	name string
	run  func(b *testing.B)
}

// runContenders runs each contender as a sub-benchmark of b, in the order
// rotateEnv asks for (declaration order when it is unset).
func runContenders(b *testing.B, cs []contender) {
	k, _ := strconv.Atoi(os.Getenv(rotateEnv))
	k = ((k % len(cs)) + len(cs)) % len(cs)
	for i := range cs {
		c := cs[(i+k)%len(cs)]
		b.Run(c.name, c.run)
	}
}

// roundTrips is a go-redis hook that counts what a client sends: each
// command sent alone and each pipeline is one round trip.
type roundTrips struct {
	trips, cmds atomic.Int64
}

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.trips.Add(1)
		r.cmds.Add(1)
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.trips.Add(1)
		r.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// counted returns a new client of s with a round-trip counter.
func counted(s *redistest.Server) (*redis.Client, *roundTrips) {
	c := s.Client()
	rt := new(roundTrips)
	c.AddHook(rt)
	return c, rt
}

// since marks the counter's values at the start of a timed loop; report
// divides what was sent since then by b.N.
type since struct {
	rt          *roundTrips
	trips, cmds int64
}

func (r *roundTrips) mark() since { return since{r, r.trips.Load(), r.cmds.Load()} }

func (s since) report(b *testing.B) {
	if b.N == 0 {
		return
	}
	b.ReportMetric(float64(s.rt.trips.Load()-s.trips)/float64(b.N), "rt/op")
	b.ReportMetric(float64(s.rt.cmds.Load()-s.cmds)/float64(b.N), "cmds/op")
}

// seq hands out numbers no other caller in this process gets, for fresh
// keys.
var seq atomic.Int64

func freshKey(prefix string) string { return prefix + strconv.FormatInt(seq.Add(1), 10) }
