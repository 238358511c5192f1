// Package rcache is the pipeline's cache layer: [Memory], its bounded
// in-process (L1) cache, read in place through [Hit]; [Redis], its shared
// (L2) store, which keeps [Entry] values in Redis with fenced writes,
// lock-holder commits, announced writes and invalidations, and batch reads
// and writes; and the [Coder] that lays an entry out as bytes (codec,
// envelope, seal) for Redis and for the store over other backends
// (package remote). [Store] is the shared store as the pipeline uses it,
// whichever of the two it is.
//
// Package cache re-exports the value types ([Entry], [Freshness], [Codec])
// and the errors, and offers thin public caches over [Memory] and [Redis];
// package resilience builds its Memory and Redis itself, from its options
// and the go-redis client it is given.
package rcache
