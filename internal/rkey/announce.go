package rkey

// Announcements travel on a namespace's [Space.Channel]. Two kinds share
// it:
//
//   - "landed": the payload is the cache key itself, as a holder's
//     release publishes it. Waiters of the key wake and look again.
//   - a write by Set or Invalidate: the payload is AnnouncePrefix, one
//     kind byte ([KindSet] or [KindInvalidate]), [OriginLen] bytes naming
//     the writing pipeline instance, then the cache key. Every process
//     drops its in-process copy of the key (unless it wrote it), and the
//     key's waiters wake too.
//
// AnnouncePrefix is the byte 0xFF, which never starts valid UTF-8: a cache
// key that begins with it is announced as a write of another key when its
// value lands. The worst that does is drop one in-process entry and leave
// that key's waiters to their poll.
const (
	AnnouncePrefix = "\xff"
	// KindSet announces a value written by Set.
	KindSet byte = 's'
	// KindInvalidate announces a key removed by Invalidate.
	KindInvalidate byte = 'i'
	// OriginLen is the length of the origin field.
	OriginLen = 8
)

// Announcement returns the payload announcing a write of kind to key by
// origin, which must be OriginLen bytes long.
func Announcement(kind byte, origin, key string) string {
	return AnnouncePrefix + string(kind) + origin + key
}

// ParseAnnouncement splits a payload heard on a namespace's channel. A
// "landed" announcement returns kind 0 and the key; a write returns its
// kind, origin and key.
func ParseAnnouncement(payload string) (kind byte, origin, key string) {
	const head = len(AnnouncePrefix) + 1 + OriginLen
	if len(payload) < head || payload[:len(AnnouncePrefix)] != AnnouncePrefix {
		return 0, "", payload
	}
	switch k := payload[len(AnnouncePrefix)]; k {
	case KindSet, KindInvalidate:
		return k, payload[len(AnnouncePrefix)+1 : head], payload[head:]
	}
	return 0, "", payload
}
