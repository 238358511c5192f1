package lock

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/rlock"
)

// Notifier announces that the value for a key has landed, and lets waiters
// hear it. Delivery is best effort: a waiter must also poll, at a slow pace,
// as a safety net. Implementations are safe for concurrent use.
type Notifier interface {
	// Notify announces that key's value has been written.
	Notify(ctx context.Context, key string) error
	// Subscribe returns a channel that receives a signal when key is
	// announced, and a function that ends the subscription. The channel
	// has a buffer of one; announcements that find it full are dropped.
	Subscribe(key string) (<-chan struct{}, func())
}

// MemoryNotifier is a [Notifier] within one process. The zero value is ready
// to use.
type MemoryNotifier struct{ n rlock.MemoryNotifier }

// Notify signals the subscribers of key.
func (n *MemoryNotifier) Notify(ctx context.Context, key string) error { return n.n.Notify(ctx, key) }

// Subscribe implements [Notifier].
func (n *MemoryNotifier) Subscribe(key string) (<-chan struct{}, func()) { return n.n.Subscribe(key) }

// RedisNotifier is a [Notifier] across processes: Notify publishes the key on
// the namespace's Redis channel, and every RedisNotifier of that namespace
// delivers it to its local subscribers.
//
// Each RedisNotifier holds one Redis subscription, however many keys its
// subscribers wait for, so make one per process per pipeline and share it.
// The subscription is checked for liveness: after a second without a
// byte from Redis the notifier sends a PING on it, and after three seconds
// without one it takes the connection for dead (a link that stopped
// carrying bytes without closing, which TCP itself notices only minutes
// later), closes it and subscribes again on a new one, as it does after a
// broken connection. Announcements published
// while it was down are lost, which is why waiters also poll. The owner
// must call [RedisNotifier.Close]. RedisNotifier is safe for concurrent
// use.
type RedisNotifier struct{ n *rlock.RedisNotifier }

var (
	_ Notifier = (*MemoryNotifier)(nil)
	_ Notifier = (*RedisNotifier)(nil)
)

// NewRedisNotifier starts the goroutine that subscribes to the
// announcement channel of o.Namespace, checks the subscription and
// delivers its messages; [RedisNotifier.Close] stops it. It does not wait
// for Redis.
func NewRedisNotifier(client redis.UniversalClient, o RedisOptions) (*RedisNotifier, error) {
	n, err := rlock.NewRedisNotifier(client, rlock.RedisOptions(o))
	if err != nil {
		return nil, err
	}
	return &RedisNotifier{n: n}, nil
}

// Notify publishes key on the namespace's channel. A Redis failure is a
// [*backend.BackendError] with Op "notify"; an ended ctx returns ctx's error.
func (n *RedisNotifier) Notify(ctx context.Context, key string) error { return n.n.Notify(ctx, key) }

// Subscribe implements [Notifier]. After Close, subscriptions still work
// but receive nothing.
func (n *RedisNotifier) Subscribe(key string) (<-chan struct{}, func()) { return n.n.Subscribe(key) }

// Close ends the subscription and waits for the receive goroutine to
// return. Closing twice returns the first result.
func (n *RedisNotifier) Close() error { return n.n.Close() }
