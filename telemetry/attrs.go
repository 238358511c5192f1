package telemetry

import "go.opentelemetry.io/otel/attribute"

// Attribute keys set on spans and metrics.
const (
	// Pipeline is the pipeline's name.
	Pipeline = attribute.Key("resilience.pipeline")
	// Source is where the call's value came from: l1, l2, loader,
	// coalesced, waited, stale, default.
	Source = attribute.Key("resilience.source")
	// FailedOpen is true when the call went on without L2 or the lock
	// because Redis failed or its breaker was open.
	FailedOpen = attribute.Key("resilience.failed_open")
	// FailOpenReason says why the call failed open.
	FailOpenReason = attribute.Key("resilience.fail_open.reason")
	// FallbackReason says why a fallback answered: error, timeout, panic,
	// breaker_open.
	FallbackReason = attribute.Key("resilience.fallback.reason")
	// Fallback is true on a call served by the fallback chain.
	Fallback = attribute.Key("resilience.fallback")
	// LockWaitMS is how long the call waited for the lock or the value,
	// in milliseconds.
	LockWaitMS = attribute.Key("resilience.lock.wait_ms")
	// LockOutcome is acquired, waited, timeout, failed_open.
	LockOutcome = attribute.Key("resilience.lock.outcome")
	// LockFence is the fencing number of the lock grant.
	LockFence = attribute.Key("resilience.lock.fence")
	// BreakerState is the state of the breaker the stage consulted.
	BreakerState = attribute.Key("resilience.breaker.state")
	// BreakerName is the name of that breaker.
	BreakerName = attribute.Key("resilience.breaker.name")
	// Attempt is the loader attempt number, from 1.
	Attempt = attribute.Key("resilience.attempt")
	// Hit is true when a cache stage found a usable entry.
	Hit = attribute.Key("resilience.cache.hit")
	// Freshness is fresh, stale or miss.
	Freshness = attribute.Key("resilience.cache.freshness")
	// Shared is true on a single-flight span whose caller joined a load
	// another caller leads.
	Shared = attribute.Key("resilience.singleflight.shared")
	// Key is the cache key, raw or hashed; set only when Config.Keys asks.
	Key = attribute.Key("resilience.key")
	// NotFound is true when the value is a stored "not found".
	NotFound = attribute.Key("resilience.not_found")
	// Reason is the reason attribute of counters (fail-opens, fallbacks).
	Reason = attribute.Key("reason")
)

// Span names, one per stage.
const (
	SpanGet          = "resilience.get"
	SpanDo           = "resilience.do"
	SpanL1           = "resilience.l1"
	SpanSingleFlight = "resilience.singleflight"
	SpanL2           = "resilience.l2"
	SpanLock         = "resilience.lock"
	SpanLockWait     = "resilience.lock.wait"
	SpanLoad         = "resilience.load"
	SpanWriteBack    = "resilience.writeback"
	SpanFallback     = "resilience.fallback"
	SpanRefresh      = "resilience.refresh"
)

// Database conventions for Redis client spans.
const (
	DBSystemName    = attribute.Key("db.system.name")
	DBOperationName = attribute.Key("db.operation.name")
)

// DBSystemRedis is the db.system.name of Redis operations.
var DBSystemRedis = DBSystemName.String("redis")
