package httpx

import (
	"context"
	"time"

	"github.com/herdguard/herdguard/internal/retryloop"
)

// Sleep is the transport's own wait between attempts.
var Sleep = retryloop.Sleep

// SetClock replaces t's clock: now reads the time, wait waits between
// attempts. It must be called before t's first request.
func SetClock(t *Transport, now func() time.Time, wait func(ctx context.Context, d time.Duration) error) {
	t.policy.Now, t.policy.Sleep = now, wait
}
