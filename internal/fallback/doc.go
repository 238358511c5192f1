// Package fallback decides what a failed call returns instead of its error:
// a stale copy still within its grace period, then a configured default,
// then the error itself.
//
// The chain knows nothing of caches or pipelines: the caller hands it the
// error and, if it has one, a stale copy. Only package resilience uses it,
// which is why it is internal: users configure the chain through
// Builder.Stale, Builder.Default and Builder.DefaultValue, and read what it
// did in Result.Source and Result.Cause.
package fallback
