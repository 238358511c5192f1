package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/rkey"
)

// RedisNotifier is a [Notifier] across processes: Notify publishes the key on
// the namespace's Redis channel, and every RedisNotifier of that namespace
// delivers it to its local subscribers.
//
// Each RedisNotifier holds one Redis subscription, however many keys its
// subscribers wait for, so make one per process per pipeline and share it.
// go-redis re-subscribes by itself after a broken connection; announcements
// published meanwhile are lost, which is why waiters also poll. The owner
// must call [RedisNotifier.Close]. RedisNotifier is safe for concurrent use.
type RedisNotifier struct {
	client  redis.UniversalClient
	channel string
	ps      *redis.PubSub
	f       fanout

	// ready is closed by the receive goroutine on the first subscription
	// confirmation.
	ready chan struct{}
	// done is closed when the receive goroutine has returned.
	done chan struct{}

	closeOnce sync.Once // guards closing ps
	closeErr  error

	hooks atomic.Pointer[NotifierHooks] // see SetHooks
}

// NewRedisNotifier subscribes to the announcement channel of o.Namespace
// and starts the goroutine that delivers its messages; [RedisNotifier.Close]
// stops it. It does not wait for Redis: use [RedisNotifier.Ready] to.
func NewRedisNotifier(client redis.UniversalClient, o RedisOptions) (*RedisNotifier, error) {
	if client == nil {
		return nil, errors.New("lock: redis client is nil")
	}
	keys, err := rkey.New(o.Prefix, o.Namespace)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	n := &RedisNotifier{
		client:  client,
		channel: keys.Channel(),
		ready:   make(chan struct{}),
		done:    make(chan struct{}),
	}
	// Subscribe sends SUBSCRIBE now if it can (bounded by the client's dial
	// and write timeouts); if Redis is unreachable, the channel below keeps
	// reconnecting and subscribes when Redis comes back.
	n.ps = client.Subscribe(context.Background(), n.channel)
	msgs := n.ps.ChannelWithSubscriptions()
	// The receive goroutine ends when Close closes the PubSub, which
	// closes msgs.
	go n.receive(msgs)
	return n, nil
}

func (n *RedisNotifier) receive(msgs <-chan any) {
	defer close(n.done)
	confirmations := 0
	for m := range msgs {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				if confirmations++; confirmations == 1 {
					close(n.ready)
				}
				n.confirmed(confirmations)
			}
		case *redis.Message:
			n.f.deliver(n.message(m.Payload))
		}
	}
}

// Ready waits until Redis has confirmed the subscription, so that
// announcements published from then on are delivered. It returns ctx's
// error if ctx ends first, and an error if the notifier is closed.
func (n *RedisNotifier) Ready(ctx context.Context) error {
	select {
	case <-n.ready:
		return nil
	case <-n.done:
		return errors.New("lock: notifier closed")
	case <-ctx.Done():
		return fmt.Errorf("lock: notifier not ready: %w", ctx.Err())
	}
}

// Subscribed reports whether Redis has confirmed the subscription (once;
// go-redis re-subscribes by itself after a broken connection) and the
// notifier is not closed.
func (n *RedisNotifier) Subscribed() bool {
	select {
	case <-n.done:
		return false
	default:
	}
	select {
	case <-n.ready:
		return true
	default:
		return false
	}
}

// Notify publishes key on the namespace's channel. A Redis failure is a
// [*BackendError] with Op "notify"; an ended ctx returns ctx's error.
func (n *RedisNotifier) Notify(ctx context.Context, key string) error {
	if err := n.client.Publish(ctx, n.channel, key).Err(); err != nil {
		return failure(ctx, "notify", key, err)
	}
	return nil
}

// Subscribe implements [Notifier]. After Close, subscriptions still work
// but receive nothing.
func (n *RedisNotifier) Subscribe(key string) (<-chan struct{}, func()) {
	return n.f.subscribe(key)
}

// Mark returns a number to pass to SubscribeSince, as
// [MemoryNotifier.Mark] does.
func (n *RedisNotifier) Mark() uint64 { return n.f.mark() }

// SubscribeSince is Subscribe, with the channel already signalled if key
// may have been announced since Mark returned mark: a caller that read
// Mark before a Redis look learns of an announcement delivered after it,
// even one that came before it subscribed.
func (n *RedisNotifier) SubscribeSince(key string, mark uint64) (<-chan struct{}, func()) {
	return n.f.subscribeSince(key, mark)
}

// Close ends the subscription and waits for the receive goroutine to
// return. Closing twice returns the first result.
func (n *RedisNotifier) Close() error {
	n.closeOnce.Do(func() {
		n.closeErr = n.ps.Close()
		<-n.done
	})
	return n.closeErr
}
