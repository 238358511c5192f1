package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/metric"
)

// ReasonDecryptFailed is the reason of a [MetricCorrupt] count for an
// entry that did not decrypt.
const ReasonDecryptFailed = "decrypt_failed"

// DecryptFailed counts one cached entry that did not decrypt (sealed by a
// key the pipeline does not hold, altered, moved from another key, or
// stored in clear) as [MetricCorrupt] with [Reason] decrypt_failed.
func (in *Instruments) DecryptFailed(ctx context.Context, tier string) {
	in.corrupt.Add(ctx, 1, metric.WithAttributes(in.pipeline, Tier.String(tier), Reason.String(ReasonDecryptFailed)))
}
