// Package slotreload makes a Redis Cluster client reload its slot map when
// the operations sent through it fail: see [Reloader].
package slotreload

import (
	"context"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Every is the least time between two reloads of a Redis Cluster
// client's slot map that a [Reloader] asks for: the slot map is
// at most this much older than the first failure after a failover, and a
// client whose commands all fail asks its cluster for the map five times a
// second at most (go-redis coalesces the reloads it is asked for, one at a
// time).
const Every = 200 * time.Millisecond

// stateReloader is what a [Reloader] needs of a Redis Cluster client:
// [*redis.ClusterClient] has it; a single-node or Sentinel client has not.
type stateReloader interface {
	ReloadState(ctx context.Context)
}

var _ stateReloader = (*redis.ClusterClient)(nil)

// Reloader makes a Redis Cluster client reload its slot map when the
// pipeline's Redis operations fail or the Redis breaker refuses them.
//
// go-redis reloads the map on a MOVED reply, or when it is older than
// ClusterStateReloadInterval (a minute by default). A master that dies
// sends no MOVED: until the map is reloaded, every command for its slots
// goes to the dead address, long after its replica has been promoted. The
// pipeline sees the failures first, so it asks for the reload, at most
// once per [Every]; the half-open probe of the Redis breaker then
// finds the new master, and locking and L2 come back within about the
// breaker's OpenTimeout of the promotion, whatever the client's reload
// interval. The reload runs in go-redis's background goroutine; asking for
// it never blocks the caller.
//
// A nil *Reloader (a client that is not a cluster) does nothing. It is
// safe for concurrent use.
type Reloader struct {
	client stateReloader
	// last is when a reload was last asked for, in nanoseconds since
	// start; 0 before the first.
	last  atomic.Int64
	start time.Time
}

// New returns the reloader of client, or nil when client cannot reload a
// slot map (it is not a Redis Cluster client, or a nil one).
func New(client redis.UniversalClient) *Reloader {
	c, ok := client.(stateReloader)
	if !ok {
		return nil
	}
	if v := reflect.ValueOf(c); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil
	}
	return &Reloader{client: c, start: time.Now()}
}

// Failed tells r that a Redis operation failed or was refused by the
// breaker: it asks the client to reload its slot map, unless it asked less
// than [Every] ago.
func (r *Reloader) Failed() {
	if r == nil {
		return
	}
	// Offset by one, so that a first call at start still counts as after
	// the zero value of last.
	now := int64(time.Since(r.start)) + 1
	last := r.last.Load()
	if last != 0 && now-last < int64(Every) {
		return
	}
	if !r.last.CompareAndSwap(last, now) {
		return // another caller asks for this reload
	}
	// ReloadState only starts (or queues) go-redis's own reload, which
	// runs on a context of its own: ctx is not used.
	r.client.ReloadState(context.Background())
}
