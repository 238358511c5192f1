package rlock

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
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
//
// It also remembers, per slot of key hashes, the number of the last
// announcement it delivered, so that a caller may look first and subscribe
// only when the look says it must wait: [fanout.mark] before the look,
// [fanout.subscribeSince] after it, and an announcement delivered in
// between is not lost (a key sharing the slot wakes the subscriber for
// nothing, which costs it one look).
type fanout struct {
	mu   sync.Mutex // guards subs, and orders deliveries against subscriptions
	subs map[string]map[chan struct{}]struct{}
	seq  atomic.Uint64
	last [markSlots]atomic.Uint64 // written under mu
}

// markSlots is how many slots of key hashes a fanout remembers its last
// delivery for.
const markSlots = 1024

var markSeed = maphash.MakeSeed()

func markSlot(key string) uint64 { return maphash.String(markSeed, key) % markSlots }

// mark returns the number of the last announcement delivered, to pass to
// subscribeSince.
func (f *fanout) mark() uint64 { return f.seq.Load() }

// subscribeSince is subscribe, with the channel already signalled when an
// announcement of key (or of a key sharing its slot) was delivered after
// mark returned m.
func (f *fanout) subscribeSince(key string, m uint64) (<-chan struct{}, func()) {
	ch, cancel := f.add(key)
	// A delivery whose lock section came before subscribe's recorded its
	// number first; one after it found the subscriber.
	if f.last[markSlot(key)].Load() > m {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	return ch, cancel
}

func (f *fanout) subscribe(key string) (<-chan struct{}, func()) {
	return f.add(key)
}

func (f *fanout) add(key string) (chan struct{}, func()) {
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
	n := f.seq.Add(1)
	slot := &f.last[markSlot(key)]
	f.mu.Lock()
	defer f.mu.Unlock()
	if slot.Load() < n {
		slot.Store(n)
	}
	for ch := range f.subs[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
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

// Mark returns a number to pass to SubscribeSince. A caller that takes a
// mark before it looks, and subscribes with SubscribeSince only when it
// must wait, loses no announcement made in between, and a look that finds
// what it wanted costs no subscription.
func (n *MemoryNotifier) Mark() uint64 { return n.f.mark() }

// SubscribeSince is Subscribe, with the channel already signalled if key
// may have been announced since Mark returned mark.
func (n *MemoryNotifier) SubscribeSince(key string, mark uint64) (<-chan struct{}, func()) {
	return n.f.subscribeSince(key, mark)
}

var (
	_ marker = (*MemoryNotifier)(nil)
	_ marker = (*RedisNotifier)(nil)
)

// marker is a [Notifier] with marks: both of the package's notifiers are.
type marker interface {
	Notifier
	Mark() uint64
	SubscribeSince(key string, mark uint64) (<-chan struct{}, func())
}
