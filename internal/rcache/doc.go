// Package rcache is the shared (L2) store of the pipeline: [Redis], which
// keeps [Entry] values in Redis with fenced writes, lock-holder commits,
// announced writes and invalidations and batch reads and writes, and the
// [Coder] that lays an entry out as bytes (codec, envelope, seal) for it
// and for the stores of other backends (package remote).
//
// Package cache re-exports the value types ([Entry], [Freshness], [Codec])
// and the errors, and offers a thin public Redis cache over [Redis];
// package resilience builds a [Redis] itself from the go-redis client it
// is given.
package rcache
