package rlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/retryloop"
	"github.com/herdguard/herdguard/internal/rkey"
)

// RedisNotifier is a [Notifier] across processes: Notify publishes the key on
// the namespace's Redis channel, and every RedisNotifier of that namespace
// delivers it to its local subscribers.
//
// Each RedisNotifier holds one Redis subscription, however many keys its
// subscribers wait for, so make one per process per pipeline and share it.
// The subscription is checked for liveness: after [NotifierPingInterval]
// without a byte from Redis the notifier sends a PING on it, and after
// [NotifierDeadAfter] without one it takes the connection for dead (a
// link that stopped carrying bytes without closing, which TCP itself
// notices only minutes later), closes it and subscribes again on a new
// one, as it does after a broken connection. Announcements published
// while it was down are lost, which is why waiters also poll. The owner
// must call [RedisNotifier.Close]. RedisNotifier is safe for concurrent
// use.
type RedisNotifier struct {
	client  redis.UniversalClient
	channel string
	f       fanout

	// ctx is ended by Close: it stops the receive goroutine's dials and
	// waits.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex    // guards ps and closed
	ps     *redis.PubSub // the current subscription's, for Close to end
	closed bool

	// live is set while the current connection's subscription is
	// confirmed and has not gone silent; see Subscribed.
	live atomic.Bool
	// confirmations counts subscription confirmations; the receive
	// goroutine's alone.
	confirmations int

	// ready is closed by the receive goroutine on the first subscription
	// confirmation.
	ready chan struct{}
	// done is closed when the receive goroutine has returned.
	done chan struct{}

	closeOnce sync.Once // guards closeErr
	closeErr  error

	hooks atomic.Pointer[NotifierHooks] // see SetHooks
}

// The liveness check of a [RedisNotifier]'s subscription. A PING costs
// Redis one command per interval of silence (none while announcements
// flow), and its reply comes back on the subscription's own connection,
// which is what must be shown alive: the pool's connections answering
// says nothing about it, and a heartbeat published on the channel would
// reach every process that subscribes to it. A dead subscription is thus found at most
// NotifierDeadAfter after its last byte; subscribing again then takes a
// backoff wait (from 100 ms, doubling, jittered, at most a second) and a
// round trip.
const (
	// NotifierPingInterval is how long the subscription may be silent
	// before the notifier pings Redis on it: a second.
	NotifierPingInterval = time.Second
	// NotifierDeadAfter is how long the subscription may be silent, pings
	// included, before the notifier takes it for dead and subscribes on a
	// new connection: three seconds (two pings unanswered).
	NotifierDeadAfter = 3 * NotifierPingInterval
)

// NewRedisNotifier starts the goroutine that subscribes to the
// announcement channel of o.Namespace, checks the subscription and
// delivers its messages; [RedisNotifier.Close] stops it. It does not wait
// for Redis: use [RedisNotifier.Ready] to.
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
	n.ctx, n.cancel = context.WithCancel(context.Background())
	// The receive goroutine ends when Close ends ctx and the current
	// subscription.
	go n.run()
	return n, nil
}

// run subscribes, listens until the subscription fails or goes silent,
// and subscribes again on a new connection, until Close.
func (n *RedisNotifier) run() {
	defer close(n.done)
	bo := resubscribe.NewBackOff()
	for {
		// No channel yet: this makes no connection, so the PubSub is
		// known to Close before any I/O that Close must interrupt.
		ps := n.client.Subscribe(n.ctx)
		if !n.use(ps) {
			_ = ps.Close()
			return
		}
		heard := n.listen(ps)
		n.live.Store(false)
		_ = ps.Close()
		if heard {
			bo.Reset()
		}
		t := time.NewTimer(bo.NextBackOff())
		select {
		case <-t.C:
		case <-n.ctx.Done():
			t.Stop()
			return
		}
	}
}

// use makes ps the current subscription; it reports false if the
// notifier is closed.
func (n *RedisNotifier) use(ps *redis.PubSub) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	n.ps = ps
	return true
}

// listen subscribes on ps and delivers what it hears until the
// connection fails, goes silent for NotifierDeadAfter, or Close ends it.
// It reports whether the subscription was confirmed.
//
// ReceiveTimeout bounds each read by the ping interval; a read that times
// out leaves the connection open (go-redis keeps it on a timeout), and a
// reply split by a timeout would show as a protocol error, which ends the
// subscription like any other failure.
func (n *RedisNotifier) listen(ps *redis.PubSub) (confirmed bool) {
	if err := ps.Subscribe(n.ctx, n.channel); err != nil {
		return false
	}
	var silent time.Duration
	for {
		m, err := ps.ReceiveTimeout(n.ctx, NotifierPingInterval)
		switch {
		case err != nil && isTimeout(err) && n.ctx.Err() == nil:
			if silent += NotifierPingInterval; silent >= NotifierDeadAfter {
				return confirmed
			}
			if ps.Ping(n.ctx) != nil {
				return confirmed
			}
			continue
		case err != nil:
			return confirmed
		}
		silent = 0
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				confirmed = true
				n.confirm()
			}
		case *redis.Message:
			n.f.deliver(n.message(m.Payload))
		}
	}
}

// confirm records a subscription confirmation. The hook runs first, so
// that whoever sees Subscribed (or Ready) return sees what the hook did:
// after a re-subscription, the pipeline's L1 already dropped.
func (n *RedisNotifier) confirm() {
	n.confirmations++
	n.confirmed(n.confirmations)
	n.live.Store(true)
	if n.confirmations == 1 {
		close(n.ready)
	}
}

// isTimeout reports whether err is a read that found nothing in time.
func isTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout()
}

// resubscribe paces subscriptions that fail or go silent without a
// confirmation: from 100 ms, doubling, jittered, up to a second, for as
// long as the notifier is open.
var resubscribe = retryloop.Policy{
	MaxAttempts: math.MaxInt,
	Initial:     100 * time.Millisecond, Max: time.Second,
	Multiplier: 2, RandomizationFactor: 0.5,
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

// Subscribed reports whether the subscription is up now: Redis confirmed
// it on the current connection, which has not failed nor gone silent
// for [NotifierDeadAfter], and the notifier is not closed. While it is
// false, announcements are not heard.
func (n *RedisNotifier) Subscribed() bool {
	select {
	case <-n.done:
		return false
	default:
	}
	return n.live.Load()
}

// Notify publishes key on the namespace's channel. A Redis failure is a
// [*backend.BackendError] with Op "notify"; an ended ctx returns ctx's error.
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
		n.cancel()
		n.mu.Lock()
		n.closed = true
		ps := n.ps
		n.mu.Unlock()
		if ps != nil {
			// Ends a read in progress; the receive goroutine closes it
			// too (a second close is harmless).
			if err := ps.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
				n.closeErr = err
			}
		}
		<-n.done
	})
	return n.closeErr
}
