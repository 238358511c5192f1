// Command benchcmp runs the peer comparison of package bench and prints,
// per path, each contender's median ns/op, B/op and allocs/op (and round
// trips per op where Redis is involved, bytes per entry for the memory
// path), then the ratio of this project's contenders to each peer's:
// below 1, this project is faster (or smaller).
//
//	cd examples && go run ./benchcmp
//	cd examples && go run ./benchcmp -rounds 9 -benchtime 2s
//	cd examples && go run ./benchcmp -bench 'L1Hit|Breaker'
//
// It builds the benchmark binary once, then runs rounds: each round runs
// every benchmark function once, each in a process of its own, the
// functions in an order that rotates from round to round, and within a
// function the contenders in an order that rotates too (the bench
// package's HERDGUARD_BENCH_ROTATE). Contenders of one path therefore run
// seconds apart, in turn, and each ratio is taken within one round; the
// report gives the median of those ratios and their range. On a shared
// machine absolute times can move twofold from one minute to the next,
// while ratios taken this way hold. The load average at the start and end
// is printed with the results.
//
// The contenders that measure this project are those whose sub-benchmark
// name starts with "pipeline" or "breaker." (-ours). The memory path runs
// in the first round only (-once): a heap size does not drift with load.
//
// The Redis paths start a private redis-server (package
// internal/redistest), which must be on PATH; nothing leaves loopback.
package main
