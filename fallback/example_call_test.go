package fallback_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/herdguard/herdguard/fallback"
)

// price is the call to protect: a plain function, here one whose service
// answers once and then goes down.
func price(_ context.Context, calls *int) (int, error) {
	*calls++
	if *calls == 1 {
		return 100, nil
	}
	return 0, errors.New("price service down")
}

// Example wraps a plain function call in a Chain: the caller keeps the last
// good answer and when it got it, offers it while it is within a grace of
// one minute, and the chain serves it, then the default once the copy is too
// old.
func Example() {
	chain := fallback.Chain[int]{Default: fallback.Value(-1)}
	const grace = time.Minute

	var (
		calls  int
		last   int       // the last good answer
		lastAt time.Time // when it came; zero: none yet
	)
	get := func(ctx context.Context, now time.Time) (int, fallback.Source, error) {
		v, err := price(ctx, &calls)
		if err == nil {
			last, lastAt = v, now
			return v, fallback.None, nil
		}
		inGrace := !lastAt.IsZero() && now.Sub(lastAt) <= grace
		return chain.Resolve(ctx, "price:book", err, last, inGrace)
	}

	ctx := context.Background()
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, at := range []time.Duration{0, 30 * time.Second, 2 * time.Minute} {
		v, src, err := get(ctx, start.Add(at))
		fmt.Printf("after %v: %d, fallback %v, err %v\n", at, v, src, err)
	}
	// Output:
	// after 0s: 100, fallback none, err <nil>
	// after 30s: 100, fallback stale, err <nil>
	// after 2m0s: -1, fallback default, err <nil>
}
