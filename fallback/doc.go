// Package fallback decides what a failed call returns instead of its error:
// a stale copy still within its grace period, then a configured default,
// then the error itself.
//
// A [Chain] knows nothing of caches or pipelines, so it can wrap any call:
// the caller makes the call, and when it fails hands [Chain.Resolve] the
// error and, if it has one, a stale copy. Whether a copy is still within
// its grace period is the caller's to decide, since only the caller knows
// when the copy was made; a copy past its grace is simply not offered.
// Resolve reports which link answered ([Stale], [Default] or [None]).
//
// Package resilience runs one Chain per pipeline, configured through
// Builder.Stale, Builder.Default and Builder.DefaultValue, and reports what
// it did in Result.Source and Result.Cause.
package fallback
