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
	// MetricDuplicateLoads counts loads of a key begun although another
	// load of it was known to be under way, or may have been, by cause
	// ([Reason]): [DuplicateTakeover], [DuplicateMaxWait],
	// [DuplicateFailOpen]. It reads 0 while the lock works.
	MetricDuplicateLoads = "herdguard.loader.duplicates"
)

// The causes of a duplicate load, the [Reason] of [MetricDuplicateLoads].
const (
	// DuplicateTakeover is a load under a grant that took the lock over
	// from a holder that stopped beating (crashed, paused or cut off: its
	// own load may still run).
	DuplicateTakeover = "takeover"
	// DuplicateMaxWait is a load without the lock after MaxWait, while
	// the holder still beat.
	DuplicateMaxWait = "max_wait"
	// DuplicateFailOpen is a load without the lock because the lock's
	// backend (Redis or another) failed or its breaker was open.
	DuplicateFailOpen = "fail_open"
)
