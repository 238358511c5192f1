package telemetry

import "go.opentelemetry.io/otel/attribute"

// Attribute keys set on spans and metrics.
const (
	// Pipeline is the pipeline's name.
	Pipeline = attribute.Key("herdguard.pipeline")
	// Source is where the call's value came from: l1, l2, loader,
	// coalesced, waited, stale, default.
	Source = attribute.Key("herdguard.source")
	// FailedOpen is true when the call went on without L2 or the lock
	// because Redis failed or its breaker was open.
	FailedOpen = attribute.Key("herdguard.failed_open")
	// FailOpenReason says why the call failed open.
	FailOpenReason = attribute.Key("herdguard.fail_open.reason")
	// FallbackReason says why a fallback answered: error, timeout, panic,
	// breaker_open.
	FallbackReason = attribute.Key("herdguard.fallback.reason")
	// Fallback is true on a call served by the fallback chain.
	Fallback = attribute.Key("herdguard.fallback.used")
	// LockWaitMS is how long the call waited for the lock or the value,
	// in milliseconds.
	LockWaitMS = attribute.Key("herdguard.lock.wait_ms")
	// LockOutcome is acquired, waited, timeout, failed_open.
	LockOutcome = attribute.Key("herdguard.lock.outcome")
	// LockFence is the fencing number of the lock grant.
	LockFence = attribute.Key("herdguard.lock.fence")
	// BreakerState is the state of the breaker the stage consulted.
	BreakerState = attribute.Key("herdguard.breaker.state")
	// BreakerName is the name of that breaker.
	BreakerName = attribute.Key("herdguard.breaker.name")
	// Attempt is the loader attempt number, from 1.
	Attempt = attribute.Key("herdguard.attempt")
	// Hit is true when a cache stage found a usable entry.
	Hit = attribute.Key("herdguard.cache.hit")
	// Freshness is fresh, stale or miss.
	Freshness = attribute.Key("herdguard.cache.freshness")
	// Shared is true on a single-flight span whose caller joined a load
	// another caller leads.
	Shared = attribute.Key("herdguard.singleflight.shared")
	// Key is the cache key, raw or hashed; set only when Config.Keys asks.
	Key = attribute.Key("herdguard.key")
	// NotFound is true when the value is a stored "not found".
	NotFound = attribute.Key("herdguard.not_found")
	// Reason is the reason attribute of counters (fail-opens, fallbacks).
	Reason = attribute.Key("herdguard.reason")
	// Outcome is the outcome of a loader call on its metrics: ok,
	// not_found, error, timeout, panic, breaker_open.
	Outcome = attribute.Key("herdguard.outcome")
	// Tier is the cache tier of a corrupt entry: l1, l2.
	Tier = attribute.Key("herdguard.tier")
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
