// Command herdguard shows operators what a pipeline's keys hold in Redis
// during an incident, and invalidates a key safely. It reads the layout
// the library writes (internal/rkey): a key's value hash, its lock hash
// and its pipeline's announcement channel.
//
// Usage:
//
//	herdguard inspect     -redis ADDR [-prefix hg:] -pipeline NAME [-show-value] KEY
//	herdguard locks       -redis ADDR [-prefix hg:] -pipeline NAME
//	herdguard subscribers -redis ADDR [-prefix hg:] -pipeline NAME
//	herdguard invalidate  -redis ADDR [-prefix hg:] -pipeline NAME [-hold 30s] KEY
//
// inspect prints the value's state (absent, fresh, stale, tombstone: an
// invalidation's or a stored not-found; foreign for data the library did
// not write), its fence and expiry, and the lock: held or free, the
// holder's token and fence, the age of its last beat (Redis server clock),
// the dead-after it declared, the lease left (PTTL), and whether a
// TryAcquire would take it over now (the holder's beat is past its
// dead-after, or the key holds foreign data). The value's bytes are
// printed only with -show-value: values may be secret.
//
// locks lists the pipeline's held locks (SCAN, never KEYS), oldest beat
// first. subscribers prints PUBSUB NUMSUB of the announcement channel:
// one subscription per open pipeline instance. invalidate runs the cache's
// fenced invalidate script, as Pipeline.Invalidate does: a tombstone above
// every fence so far (for -hold, default resilience.DefaultLockLease),
// the key's lock revoked so that a load in flight writes nothing back,
// and an announcement on which every instance drops its in-process copy.
//
// Every command takes -json for machine output, -redis (host:port or a
// redis:// URL; default 127.0.0.1:6379), -prefix (default "hg:") and
// -timeout (default 2s), which bounds the dial and each Redis command.
// The exit code is 0 on success, 1 on failure (Redis unreachable, a
// command refused) and 2 for a bad command line.
package main
