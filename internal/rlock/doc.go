// Package rlock is the Redis locker and the notifiers behind package lock,
// with the forms only the pipeline (package resilience) uses: the look
// that also tries the lock (Redis.TryAcquireOrGet and its batch form),
// the batch beats and releases, the notifiers' marks (Mark,
// SubscribeSince), their hooks and health (SetHooks, Ready, Subscribed).
// Package lock wraps Redis, RedisNotifier and MemoryNotifier with the
// methods a user of lock alone needs; the pipeline uses this package
// directly.
package rlock
