package telemetry

// Metric names.
const (
	MetricCalls        = "herdguard.calls"
	MetricLoads        = "herdguard.loader.calls"
	MetricLoadDuration = "herdguard.loader.duration"
	MetricLockWait     = "herdguard.lock.wait.duration"
	MetricFailOpens    = "herdguard.fail_opens"
	MetricFallbacks    = "herdguard.fallbacks"
	MetricBreakerState = "herdguard.breaker.state"
	MetricCorrupt      = "herdguard.cache.corrupt"
)
