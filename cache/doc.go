// Package cache holds the value stores a pipeline reads before it calls a
// loader: [Memory], a bounded in-process cache, and [Redis], a shared store
// behind it.
//
// Both keep an [Entry], not a bare value, so that a stored "not found"
// (negative caching), a stored zero value and a miss are three different
// outcomes, and so that an entry remembers when it was written and how long
// its load took (for early refresh).
//
// A [Keyring], set as RedisOptions.Encrypt, seals what [Redis] stores with
// AES-GCM, each value bound to its key, and rotates keys without a value
// failing to open.
//
// The package knows nothing of pipelines; package resilience composes it.
//
// # Exported names
//
// Users of the pipeline who build its stores themselves, or use a store
// without a pipeline, need [NewMemory], [MemoryOptions], [Memory]'s methods
// (Set, Find, Lookup, Delete, Clear, Len), [NewRedis], [RedisOptions],
// [RedisClient], [Redis]'s reads and writes (Get, GetMany, Set, SetMany,
// Write, Invalidate, Commit, Delete) and its count of unusable values
// (Corrupted), the value types they exchange
// ([Entry], [Freshness] with Fresh, Stale and Miss, [Hit], [Got], [Write],
// [WriteOptions], [Written]) and [DefaultMaxEntries].
//
// Users who choose how values are stored need [Codec] and [JSON]; those who
// encrypt them need [NewKeyring], [Keyring] and [Key] (Seal and Open let a
// rotation plan be checked by hand, as the example shows; the Key and
// Keyring formatting methods keep secrets out of logs, JSON and %#v).
//
// Code that matches errors needs [ErrNotFound], [ErrExpiredEntry],
// [ErrCodec], [ErrDecrypt] and package backend's [backend.ErrLockLost]
// (returned by Commit and its batch forms).
//
// The pipeline itself also uses [Redis.Decode] (a value the lock's script
// read along with the lock), [Hit]'s FreshFor and LoadDuration (early
// refresh) and [Jitter] (TTL spread): they live here because they are the store's to know, and
// stay exported because package resilience is another package.
//
// Implementers of a backend other than Redis need package backend alone:
// its [backend.Store] and [backend.Save] are the contract of a shared byte
// store with fenced writes, which [Remote] reads and writes entries over.
package cache
