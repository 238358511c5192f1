package telemetry

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

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

// Instruments are one pipeline's metric instruments, created once.
type Instruments struct {
	calls     metric.Int64ObservableCounter
	loads     metric.Int64Counter
	loadDur   metric.Float64Histogram
	lockWait  metric.Float64Histogram
	failOpens metric.Int64Counter
	fallbacks metric.Int64Counter
	breaker   metric.Int64Gauge
	corrupt   metric.Int64Counter
	pipeline  attribute.KeyValue
}

func (in *Instruments) init(m metric.Meter, pipeline attribute.KeyValue) error {
	in.pipeline = pipeline
	var err, e error
	in.calls, e = m.Int64ObservableCounter(MetricCalls, metric.WithDescription("Calls by pipeline and by where the value came from."), metric.WithUnit("{call}"))
	err = errors.Join(err, e)
	in.loads, e = m.Int64Counter(MetricLoads, metric.WithDescription("Loader calls by outcome."), metric.WithUnit("{call}"))
	err = errors.Join(err, e)
	in.loadDur, e = m.Float64Histogram(MetricLoadDuration, metric.WithDescription("Duration of loader calls."), metric.WithUnit("s"))
	err = errors.Join(err, e)
	in.lockWait, e = m.Float64Histogram(MetricLockWait, metric.WithDescription("Time spent waiting for a distributed lock or for the value it guards."), metric.WithUnit("s"))
	err = errors.Join(err, e)
	in.failOpens, e = m.Int64Counter(MetricFailOpens, metric.WithDescription("Calls that went on without L2 or the lock because Redis failed."), metric.WithUnit("{call}"))
	err = errors.Join(err, e)
	in.fallbacks, e = m.Int64Counter(MetricFallbacks, metric.WithDescription("Calls answered by the fallback chain, by reason."), metric.WithUnit("{call}"))
	err = errors.Join(err, e)
	in.breaker, e = m.Int64Gauge(MetricBreakerState, metric.WithDescription("Breaker state: 0 closed, 1 half-open, 2 open."), metric.WithUnit("{state}"))
	err = errors.Join(err, e)
	in.corrupt, e = m.Int64Counter(MetricCorrupt, metric.WithDescription("Cached bytes that did not decode and were treated as a miss."), metric.WithUnit("{entry}"))
	err = errors.Join(err, e)
	return err
}

// ObserveCalls reports the pipeline's calls as [MetricCalls], read at
// each collection from counters the pipeline keeps anyway: read(i, open)
// is the number of calls served from sources[i], failed open or not, so
// far. A call records no measurement of its own: an L1 hit costs the
// same with a meter as without. The attribute sets are built once. The
// returned function stops the reporting.
func (in *Instruments) ObserveCalls(m metric.Meter, sources []string, read func(i int, failedOpen bool) uint64) (stop func() error, err error) {
	sets := make([][2]metric.ObserveOption, len(sources))
	for i, src := range sources {
		for j := range sets[i] {
			sets[i][j] = metric.WithAttributeSet(attribute.NewSet(in.pipeline, Source.String(src), FailedOpen.Bool(j == 1)))
		}
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for i := range sources {
			for j := range sets[i] {
				if n := read(i, j == 1); n > 0 {
					o.ObserveInt64(in.calls, int64(n), sets[i][j])
				}
			}
		}
		return nil
	}, in.calls)
	if err != nil {
		return nil, err
	}
	return reg.Unregister, nil
}

// Load records one loader call.
func (in *Instruments) Load(ctx context.Context, outcome string, took time.Duration) {
	o := metric.WithAttributes(in.pipeline, Outcome.String(outcome))
	in.loads.Add(ctx, 1, o)
	in.loadDur.Record(ctx, took.Seconds(), o)
}

// LockWait records time spent waiting on the lock, by outcome.
func (in *Instruments) LockWait(ctx context.Context, outcome string, took time.Duration) {
	in.lockWait.Record(ctx, took.Seconds(), metric.WithAttributes(in.pipeline, LockOutcome.String(outcome)))
}

// FailOpen counts one call that failed open, by reason.
func (in *Instruments) FailOpen(ctx context.Context, reason string) {
	in.failOpens.Add(ctx, 1, metric.WithAttributes(in.pipeline, Reason.String(reason)))
}

// Fallback counts one call answered by the fallback chain.
func (in *Instruments) Fallback(ctx context.Context, source, reason string) {
	in.fallbacks.Add(ctx, 1, metric.WithAttributes(in.pipeline, Source.String(source), Reason.String(reason)))
}

// BreakerState records a breaker's state (0 closed, 1 half-open, 2 open).
func (in *Instruments) BreakerState(ctx context.Context, name string, state int64) {
	in.breaker.Record(ctx, state, metric.WithAttributes(in.pipeline, BreakerName.String(name)))
}

// Corrupt counts one cached entry that did not decode.
func (in *Instruments) Corrupt(ctx context.Context, tier string) {
	in.corrupt.Add(ctx, 1, metric.WithAttributes(in.pipeline, Tier.String(tier)))
}
