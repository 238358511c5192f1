package lock

import (
	"context"
	"sync"
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

// fanout delivers announcements to the local subscribers of each key. The
// zero value is ready to use.
type fanout struct {
	mu   sync.Mutex // guards subs
	subs map[string]map[chan struct{}]struct{}
}

func (f *fanout) subscribe(key string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	f.mu.Lock()
	if f.subs == nil {
		f.subs = make(map[string]map[chan struct{}]struct{})
	}
	set := f.subs[key]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		f.subs[key] = set
	}
	set[ch] = struct{}{}
	f.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			if set := f.subs[key]; set != nil {
				delete(set, ch)
				if len(set) == 0 {
					delete(f.subs, key)
				}
			}
		})
	}
}

// deliver signals every subscriber of key without blocking.
func (f *fanout) deliver(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ch := range f.subs[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// subscribers returns how many subscriptions key has.
func (f *fanout) subscribers(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs[key])
}

// MemoryNotifier is a [Notifier] within one process. The zero value is ready
// to use.
type MemoryNotifier struct{ f fanout }

// Notify signals the subscribers of key.
func (n *MemoryNotifier) Notify(_ context.Context, key string) error {
	n.f.deliver(key)
	return nil
}

// Subscribe implements [Notifier].
func (n *MemoryNotifier) Subscribe(key string) (<-chan struct{}, func()) { return n.f.subscribe(key) }

var _ Notifier = (*MemoryNotifier)(nil)
