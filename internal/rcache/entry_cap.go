package rcache

import "time"

// CapFresh keeps e fresh until limit at the latest: L1 keeps a copy of an
// entry no longer than its L1TTL, however long the entry lives in L2. A
// stale-until before limit moves to it, since an entry is never stale
// before it expires.
func (e *Entry[V]) CapFresh(limit time.Time) {
	if e.Expires.After(limit) {
		e.Expires = limit
		if e.StaleUntil.Before(limit) {
			e.StaleUntil = limit
		}
	}
}
