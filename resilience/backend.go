package resilience

import (
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/keyring"
)

// BackendOptions configures the pipeline's use of a [backend.Backend]. Zero fields
// take defaults.
type BackendOptions struct {
	// Codec encodes values.
	// default: cache.JSON
	Codec cache.Codec
	// OpTimeout bounds each backend operation, from when the backend
	// sends it (see backend.Budget): the burst's own wait for a
	// connection does not count.
	// default: 1 second (DefaultBackendTimeout)
	OpTimeout time.Duration
	// Breaker configures the pipeline's breaker around backend
	// operations, as RedisOptions.Breaker does around Redis's.
	// default: as for Redis, named "backend"
	Breaker breaker.Settings
	// SharedBreaker, if not nil, is used instead of a breaker of the
	// pipeline's own.
	SharedBreaker *breaker.Breaker
	// Encrypt, if not nil, seals every value stored in the backend, as
	// RedisOptions.Encrypt does in Redis.
	// default: nil (values stored in clear)
	Encrypt *keyring.Ring
}
