package resilience

// Source says where a call's value came from.
type Source uint8

const (
	// SourceNone is the source of a failed call.
	SourceNone Source = iota
	// SourceL1 is the in-process cache.
	SourceL1
	// SourceL2 is the Redis cache.
	SourceL2
	// SourceLoader is this caller's own loader call.
	SourceLoader
	// SourceCoalesced is a loader call another caller in this process led.
	SourceCoalesced
	// SourceWaited is a value another process loaded while this one waited
	// on the distributed lock.
	SourceWaited
	// SourceStale is a stale copy served by the fallback chain, or by
	// stale-while-revalidate.
	SourceStale
	// SourceDefault is the fallback chain's default.
	SourceDefault
)

var sourceNames = [...]string{"none", "l1", "l2", "loader", "coalesced", "waited", "stale", "default"}

// String returns the source's name as it appears in spans and metrics.
func (s Source) String() string {
	if int(s) < len(sourceNames) {
		return sourceNames[s]
	}
	return "unknown"
}

// Result is what a call returns besides its error: the value and how it was
// obtained.
type Result[V any] struct {
	// Value is the value; the zero value when NotFound or on error.
	Value V
	// Source says where Value came from.
	Source Source
	// NotFound is set when the outcome is a stored "not found": the
	// call's error is then [ErrNotFound].
	NotFound bool
	// FailedOpen is set when the call went on without the Redis cache or
	// the distributed lock because Redis failed or its breaker was open.
	FailedOpen bool
	// FailOpenCause is the Redis error, or the open breaker's refusal
	// (matching breaker.ErrOpen), that made the call fail open; nil when
	// FailedOpen is not set.
	FailOpenCause error
	// Cause is the error the fallback chain answered for, when Source is
	// SourceStale or SourceDefault because the loader failed; nil
	// otherwise.
	Cause error
}

// FellBack reports whether the fallback chain served the value.
func (r *Result[V]) FellBack() bool { return r.Cause != nil }

// out is what a caller gets of a value the cache holds: the value itself,
// or its copy with Clone.
func (p *Pipeline[V]) out(v V) V {
	if c := p.writes.clone; c != nil {
		return c(v)
	}
	return v
}
