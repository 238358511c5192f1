package backendtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/herdguard/herdguard/backend"
)

// Memory is a [backend.Backend] in memory: every Open of one Memory
// shares its state, as the processes sharing a database would, so that
// pipelines of one process stand for pipelines of many. The zero value is
// ready to use; it is safe for concurrent use.
type Memory struct {
	mu     sync.Mutex
	spaces map[string]*space
}

var _ backend.Backend = (*Memory)(nil)

// errClosed is returned by the methods of a closed view.
var errClosed = errors.New("backendtest: view closed")

// space is one namespace's state.
type space struct {
	mu       sync.Mutex
	values   map[string]memValue
	locks    map[string]memLock
	fences   map[string]int64 // the last fence handed out, per key
	subs     map[string]map[chan struct{}]struct{}
	watchers map[*watcher]struct{}
}

type memValue struct {
	raw   []byte
	fence int64
	until time.Time
}

type memLock struct {
	token   string
	fence   int64
	expires time.Time
	beat    time.Time     // the holder's last beat
	every   time.Duration // the holder's heartbeat
}

type watcher struct {
	onWrite func(key, origin string)
	onReset func()
}

// Open implements [backend.Backend].
func (m *Memory) Open(s backend.Scope) (backend.Shared, error) {
	if s.Namespace == "" {
		return nil, errors.New("backendtest: empty namespace")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.spaces == nil {
		m.spaces = make(map[string]*space)
	}
	sp := m.spaces[s.Namespace]
	if sp == nil {
		sp = &space{
			values: map[string]memValue{}, locks: map[string]memLock{}, fences: map[string]int64{},
			subs: map[string]map[chan struct{}]struct{}{}, watchers: map[*watcher]struct{}{},
		}
		m.spaces[s.Namespace] = sp
	}
	return &view{sp: sp, heartbeat: s.Heartbeat, mine: map[*watcher]struct{}{}}, nil
}

// view is one Open of a Memory.
type view struct {
	sp        *space
	heartbeat time.Duration
	mu        sync.Mutex // guards closed and mine
	closed    bool
	mine      map[*watcher]struct{}
}

var _ backend.Shared = (*view)(nil)

// System names the backend on spans.
func (v *view) System() string { return "memory" }

// Subscribed reports whether the view has a watch: in memory, a watch is
// up as soon as it is made.
func (v *view) Subscribed() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return !v.closed && len(v.mine) > 0
}

func (v *view) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return errClosed
	}
	return nil
}

// next is the next fence of key, above every grant, write and fence so
// far; sp.mu held.
func (sp *space) next(key string) int64 {
	f := sp.fences[key]
	if val, ok := sp.values[key]; ok && val.fence > f {
		f = val.fence
	}
	if l, ok := sp.locks[key]; ok && l.fence > f {
		f = l.fence
	}
	f++
	sp.fences[key] = f
	return f
}

// notify wakes key's subscribers; sp.mu held.
func (sp *space) notify(key string) {
	for ch := range sp.subs[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Load implements backend.Store.
func (v *view) Load(ctx context.Context, key string) ([]byte, error) {
	if err := v.check(ctx); err != nil {
		return nil, err
	}
	v.sp.mu.Lock()
	defer v.sp.mu.Unlock()
	val, ok := v.sp.values[key]
	if !ok || !time.Now().Before(val.until) {
		return nil, nil
	}
	return append([]byte(nil), val.raw...), nil
}

// Save implements backend.Store.
func (v *view) Save(ctx context.Context, key string, raw []byte, s backend.Save) (bool, error) {
	if err := v.check(ctx); err != nil {
		return false, err
	}
	if s.Fence < 0 {
		return false, errors.New("backendtest: save: negative fence")
	}
	now := time.Now()
	sp := v.sp
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if s.Token != "" && !sp.held(key, s.Token, now) {
		return false, fmt.Errorf("backendtest: save: %w", backend.ErrLockLost)
	}
	stored := true
	if old, ok := sp.values[key]; ok && now.Before(old.until) {
		stored = old.fence <= s.Fence && (s.Fence != 0 || old.fence == 0)
	}
	if stored {
		sp.values[key] = memValue{raw: append([]byte(nil), raw...), fence: s.Fence, until: s.Until}
		if s.Fence > sp.fences[key] {
			sp.fences[key] = s.Fence
		}
	}
	if s.Token != "" && s.Release {
		delete(sp.locks, key)
		sp.notify(key)
	}
	return stored, nil
}

// NextFence implements backend.Store.
func (v *view) NextFence(ctx context.Context, key string, revoke bool) (int64, error) {
	if err := v.check(ctx); err != nil {
		return 0, err
	}
	sp := v.sp
	sp.mu.Lock()
	defer sp.mu.Unlock()
	f := sp.next(key)
	if revoke {
		if _, ok := sp.locks[key]; ok {
			delete(sp.locks, key)
			sp.notify(key) // the waiters may take the lock now
		}
	}
	return f, nil
}

// Notify implements backend.Shared.
func (v *view) Notify(ctx context.Context, key string) error {
	if err := v.check(ctx); err != nil {
		return &backend.BackendError{Op: "notify", Err: err}
	}
	v.sp.mu.Lock()
	defer v.sp.mu.Unlock()
	v.sp.notify(key)
	return nil
}

// Subscribe implements backend.Shared.
func (v *view) Subscribe(key string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	sp := v.sp
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.subs[key] == nil {
		sp.subs[key] = map[chan struct{}]struct{}{}
	}
	sp.subs[key][ch] = struct{}{}
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			sp.mu.Lock()
			defer sp.mu.Unlock()
			delete(sp.subs[key], ch)
			if len(sp.subs[key]) == 0 {
				delete(sp.subs, key)
			}
		})
	}
}

// Announce implements backend.Shared. The watchers hear it on the
// caller's goroutine, before Announce returns.
func (v *view) Announce(ctx context.Context, key, origin string) error {
	if err := v.check(ctx); err != nil {
		return err
	}
	v.sp.mu.Lock()
	ws := make([]*watcher, 0, len(v.sp.watchers))
	for w := range v.sp.watchers {
		ws = append(ws, w)
	}
	v.sp.mu.Unlock()
	for _, w := range ws {
		w.onWrite(key, origin)
	}
	return nil
}

// Watch implements backend.Shared.
func (v *view) Watch(onWrite func(key, origin string), onReset func()) func() {
	w := &watcher{onWrite: onWrite, onReset: onReset}
	v.mu.Lock()
	v.mine[w] = struct{}{}
	v.mu.Unlock()
	v.sp.mu.Lock()
	v.sp.watchers[w] = struct{}{}
	v.sp.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { v.unwatch(w) }) }
}

func (v *view) unwatch(w *watcher) {
	v.mu.Lock()
	delete(v.mine, w)
	v.mu.Unlock()
	v.sp.mu.Lock()
	delete(v.sp.watchers, w)
	v.sp.mu.Unlock()
}

// Reset makes every watcher of every view of m's namespaces hear that
// announcements may have been lost, as a backend does after a lost
// connection.
func (m *Memory) Reset() {
	m.mu.Lock()
	spaces := make([]*space, 0, len(m.spaces))
	for _, sp := range m.spaces {
		spaces = append(spaces, sp)
	}
	m.mu.Unlock()
	for _, sp := range spaces {
		sp.mu.Lock()
		ws := make([]*watcher, 0, len(sp.watchers))
		for w := range sp.watchers {
			ws = append(ws, w)
		}
		sp.mu.Unlock()
		for _, w := range ws {
			if w.onReset != nil {
				w.onReset()
			}
		}
	}
}

// Ping implements backend.Shared.
func (v *view) Ping(ctx context.Context) error { return v.check(ctx) }

// Close implements backend.Shared: it ends the view's watches. Closing
// twice returns nil.
func (v *view) Close() error {
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		return nil
	}
	v.closed = true
	ws := make([]*watcher, 0, len(v.mine))
	for w := range v.mine {
		ws = append(ws, w)
	}
	v.mu.Unlock()
	for _, w := range ws {
		v.unwatch(w)
	}
	return nil
}

// newToken returns 16 random bytes, hex encoded.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
