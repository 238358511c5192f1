// Package cache holds the value stores a pipeline reads before it calls a
// loader, for use on their own too: [Memory], a bounded in-process cache,
// and [Redis], a shared store in Redis that reads and writes the entries a
// pipeline of package resilience keeps there.
//
// Both keep an [Entry], not a bare value, so that a stored "not found"
// (negative caching), a stored zero value and a miss are three different
// outcomes, and so that an entry remembers when it was written and how long
// its load took (for early refresh).
//
// A keyring.Ring (package keyring), set as RedisOptions.Encrypt, seals
// what [Redis] stores with AES-GCM, each value bound to its key, and
// rotates keys without a value failing to open.
//
// The package knows nothing of pipelines. Package resilience builds its
// in-process and shared stores itself, on the same core as [Memory] and
// [Redis] (the same bound and eviction, the same key layout, encoding and
// sealing), so a Redis of a pipeline's prefix and namespace reads and
// writes that pipeline's entries.
//
// # Exported names
//
// Users of a store without a pipeline need [NewMemory], [MemoryOptions]
// and [Memory]'s methods (Set, Lookup, Delete, Clear, Len), [NewRedis],
// [RedisOptions] and [Redis]'s Get, Set, Delete and Invalidate, and the
// value types they exchange: [Entry] and [Freshness] with [Fresh], [Stale]
// and [Miss].
// [Jitter] spreads the TTLs of entries written together.
//
// Users who choose how values are stored need [Codec] and [JSON].
//
// Code that matches errors needs [ErrNotFound], [ErrExpiredEntry] and
// [ErrCodec] (and keyring.ErrDecrypt, for a value that does not open).
//
// Implementers of a backend other than Redis need package
// github.com/herdguard/herdguard/backend (its Store and Save are the
// contract of a shared byte store with fenced writes), not this one.
package cache
