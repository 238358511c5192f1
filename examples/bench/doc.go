// Package bench runs each path of the pipeline beside its peers, as
// sub-benchmarks of one benchmark function per path, so that they run
// minutes (not hours) apart and on the same machine state:
//
//   - L1Hit, L1HitParallel: Pipeline.Get and Pipeline.GetResult on a warm
//     in-process cache, beside otter's GetIfPresent and sturdyc's Get.
//   - L1Memory: heap per in-process cache entry (V = string) at 100k and
//     1M entries, beside otter and sturdyc.
//   - L2Hit, L2HitParallel: an L1 miss that Redis answers, with and
//     without Lock, and with Lock on a pipeline that holds no L1 copy of
//     the key (a pod that has just started), beside go-redis/cache's Get
//     (local cache off) and a bare go-redis GET.
//   - ColdMissLock, ColdMissLockParallel: a cold key loaded by the Redis
//     lock's winner, beside the bsm/redislock recipe (GET, Obtain, GET,
//     load, SET, Release).
//   - DoBreaker: a keyless Do behind Breaker and Timeout, beside
//     failsafe-go's circuit breaker and timeout, and gobreaker's Execute.
//   - Breaker, BreakerParallel: package breaker alone beside gobreaker.
//   - GetMany: a batch of 1,000 keys, 100 of them cold, beside sturdyc's
//     GetOrFetchBatch; the pipeline also with Redis and Lock.
//
// Paths that reach Redis start a private redis-server (package
// internal/redistest) and report round trips (rt/op: commands sent alone
// plus pipelines) and commands per op, counted by a go-redis hook.
//
// Absolute times on a shared machine move from one minute to the next;
// the ratio of two contenders measured seconds apart does not. The
// command in ../benchcmp runs these benchmarks in interleaved rounds and
// prints the medians and the ratios:
//
//	cd examples && go run ./benchcmp
//
// or one path with go test:
//
//	cd examples && go test -run '^$' -bench 'L1Hit' -benchmem -count 5 ./bench
//
// The sub-benchmarks whose name starts with "pipeline" or "breaker."
// measure this project; the others are its peers. go test runs every
// benchmark once (TestBenchmarks_runOnce), so that a broken benchmark
// fails the tests; it asserts nothing about time.
package bench
