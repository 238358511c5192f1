package bench

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// redisParallelism is the number of goroutines per P in the parallel
// Redis benchmarks: enough callers that several commands are in flight
// at once, as under a burst, even on a 2-core machine.
const redisParallelism = 8

// serialOps runs op(0), op(1), ... as the timed loop and reports the
// round trips and commands rt counted per op. An indirect call costs a
// nanosecond or two; a Redis round trip costs tens of microseconds.
func serialOps(b *testing.B, rt *roundTrips, op func(i int) error) {
	b.ReportAllocs()
	m := rt.mark()
	i := 0
	for b.Loop() {
		if err := op(i); err != nil {
			b.Fatal(err)
		}
		i++
	}
	m.report(b)
}

// parallelOps is serialOps from redisParallelism goroutines per P, each
// op given a number no other op gets. One untimed op per goroutine first
// fills the client's connection pool, whose dials would otherwise count.
// A worker that fails reports with Error and stops: FailNow must not run
// on a worker goroutine.
func parallelOps(b *testing.B, rt *roundTrips, op func(i int) error) {
	b.ReportAllocs()
	b.SetParallelism(redisParallelism)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) * redisParallelism {
		wg.Go(func() {
			if err := op(int(next.Add(1))); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	b.ResetTimer()
	m := rt.mark()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := op(int(next.Add(1))); err != nil {
				b.Error(err)
				return
			}
		}
	})
	m.report(b)
}
