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
package cache
