package rcache

import "hash/maphash"

// Clear removes every entry. Readers that already hold an entry keep it;
// lookups that start after Clear returns miss, unless a Set came after.
func (m *Memory[V]) Clear() {
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		for it := sh.head; it != nil; {
			next := it.next
			m.unchainLocked(maphash.String(m.seed, it.key)&m.bmask, it.key, it.hash)
			sh.unlink(it)
			m.n.Add(-1)
			it = next
		}
		sh.mu.Unlock()
	}
}
