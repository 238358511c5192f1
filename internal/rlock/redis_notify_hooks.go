package rlock

import "github.com/herdguard/herdguard/internal/rkey"

// Write is an announcement of a write that is not a lock holder's release:
// a value written directly (KindSet) or a key invalidated
// (KindInvalidate), as package cache's Write and Invalidate publish them.
type Write struct {
	Kind   byte   // rkey.KindSet or rkey.KindInvalidate
	Origin string // the writer's origin tag, as it passed it
	Key    string
}

// NotifierHooks lets the owner of a [RedisNotifier] hear more than the
// wake-ups: the writes announced on the channel, and every subscription
// confirmation. Both run on the notifier's receive goroutine, one at a
// time, so they must be quick and must not block.
type NotifierHooks struct {
	// OnWrite is called for each write heard, before the key's waiters
	// are woken.
	OnWrite func(Write)
	// OnSubscribed is called each time Redis confirms the subscription,
	// before Subscribed reports it up: n is 1 the first time, and counts
	// up with every re-subscription after a lost or silent connection
	// (see [RedisNotifier]), after which announcements published while
	// the link was down are lost.
	OnSubscribed func(n int)
}

// SetHooks installs h; it replaces hooks set before. Events heard before
// it was called are not replayed.
func (n *RedisNotifier) SetHooks(h NotifierHooks) { n.hooks.Store(&h) }

// message handles a payload heard on the channel and returns the key whose
// waiters to wake.
func (n *RedisNotifier) message(payload string) string {
	kind, origin, key := rkey.ParseAnnouncement(payload)
	if kind != 0 {
		if h := n.hooks.Load(); h != nil && h.OnWrite != nil {
			h.OnWrite(Write{Kind: kind, Origin: origin, Key: key})
		}
	}
	return key
}

// confirmed handles the count-th subscription confirmation.
func (n *RedisNotifier) confirmed(count int) {
	if h := n.hooks.Load(); h != nil && h.OnSubscribed != nil {
		h.OnSubscribed(count)
	}
}
