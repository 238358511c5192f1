package cache

import (
	"math/rand/v2"
	"time"
)

// Jitter returns ttl spread at random over [ttl*(1-fraction), ttl], so that
// keys written together do not expire together. A fraction outside (0, 1]
// returns ttl unchanged.
func Jitter(ttl time.Duration, fraction float64) time.Duration {
	if fraction <= 0 || fraction > 1 || ttl <= 0 {
		return ttl
	}
	span := time.Duration(float64(ttl) * fraction)
	if span <= 0 {
		return ttl
	}
	return ttl - time.Duration(rand.Int64N(int64(span)+1))
}
