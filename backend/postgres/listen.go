package postgres

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Notification payloads, one byte of kind first:
//
//	"w" + stored key                          wake key's waiters
//	"a" + len(origin) + ":" + origin + key    key was written by origin
//	"r"                                       a key too long to carry (or
//	                                          not valid text) was written
//
// PostgreSQL refuses payloads of 8000 bytes or more; stored keys are at
// most 520 bytes (see rowKey), and an announcement whose key and origin
// do not fit in maxPayload is sent as "r": its listeners drop their
// whole in-process cache instead of one key.
const maxPayload = 7900

// isText reports whether s can travel in a payload: valid UTF-8 without
// NUL bytes.
func isText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

func wakePayload(rowKey string) string { return "w" + rowKey }

func announcePayload(key, origin string) string {
	p := "a" + strconv.Itoa(len(origin)) + ":" + origin + key
	if len(p) > maxPayload || !isText(key) || !isText(origin) {
		// Neither can a key that is not valid text.
		return "r"
	}
	return p
}

// listener holds one pipeline's LISTEN connection and fans its
// notifications out to the subscribers of keys and to the watchers.
type listener struct {
	cfg     *pgx.ConnConfig
	channel string
	poll    time.Duration

	mu       sync.Mutex // guards subs, watchers, up, settled
	subs     map[string]map[*sub]struct{}
	watchers map[*watcher]struct{}
	up       bool // the connection is listening
	// settled is set once the view is in use without having listened
	// from its start (see awaitFirst): from then on, every connection
	// that comes up may have missed notifications.
	settled bool

	first chan struct{} // closed when the first attempt to listen ends

	cancel context.CancelFunc // ends run
	done   chan struct{}      // closed when run returns
}

type sub struct{ c chan struct{} }

type watcher struct {
	onWrite func(key, origin string)
	onReset func()
}

// newListener starts the LISTEN connection's goroutine, which runs until
// close.
func newListener(cfg *pgx.ConnConfig, channel string, poll time.Duration) *listener {
	ctx, cancel := context.WithCancel(context.Background())
	l := &listener{cfg: cfg, channel: channel, poll: poll, subs: map[string]map[*sub]struct{}{},
		watchers: map[*watcher]struct{}{}, cancel: cancel, done: make(chan struct{}), first: make(chan struct{})}
	go l.run(ctx)
	return l
}

// awaitFirst waits, up to d, for the first attempt to listen, so that a
// view is listening when Open returns it: nothing notified after Open is
// lost, and nothing needs resetting. A first attempt that fails or takes
// longer leaves the view unsettled: its first connection resets the
// watchers and wakes the waiters, as every reconnection does.
func (l *listener) awaitFirst(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-l.first:
	case <-t.C:
	}
	l.mu.Lock()
	l.settled = true
	l.mu.Unlock()
}

func (l *listener) close() {
	l.cancel()
	<-l.done
}

func (l *listener) subscribe(rk string) (<-chan struct{}, func()) {
	s := &sub{c: make(chan struct{}, 1)}
	l.mu.Lock()
	m := l.subs[rk]
	if m == nil {
		m = map[*sub]struct{}{}
		l.subs[rk] = m
	}
	m[s] = struct{}{}
	l.mu.Unlock()
	var once sync.Once
	return s.c, func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if m := l.subs[rk]; m != nil {
				delete(m, s)
				if len(m) == 0 {
					delete(l.subs, rk)
				}
			}
		})
	}
}

func (l *listener) watch(onWrite func(key, origin string), onReset func()) func() {
	w := &watcher{onWrite: onWrite, onReset: onReset}
	l.mu.Lock()
	l.watchers[w] = struct{}{}
	l.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			delete(l.watchers, w)
			l.mu.Unlock()
		})
	}
}

// wake signals the subscribers of rk, or of every key when all is set,
// without blocking.
func (l *listener) wake(rk string, all bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	signal := func(m map[*sub]struct{}) {
		for s := range m {
			select {
			case s.c <- struct{}{}:
			default:
			}
		}
	}
	if all {
		for _, m := range l.subs {
			signal(m)
		}
		return
	}
	signal(l.subs[rk])
}

// snapshot returns the current watchers, to be called without l.mu held.
func (l *listener) snapshot() []*watcher {
	l.mu.Lock()
	defer l.mu.Unlock()
	ws := make([]*watcher, 0, len(l.watchers))
	for w := range l.watchers {
		ws = append(ws, w)
	}
	return ws
}

// dispatch handles one notification's payload.
func (l *listener) dispatch(p string) {
	if p == "" {
		return
	}
	switch p[0] {
	case 'w':
		l.wake(p[1:], false)
	case 'a':
		n, rest, ok := strings.Cut(p[1:], ":")
		size, err := strconv.Atoi(n)
		if !ok || err != nil || size < 0 || size > len(rest) {
			return
		}
		origin, key := rest[:size], rest[size:]
		for _, w := range l.snapshot() {
			if w.onWrite != nil {
				w.onWrite(key, origin)
			}
		}
	case 'r':
		l.reset()
	}
}

// reset tells every watcher that announcements may have been lost, and
// wakes every waiter so that it looks again.
func (l *listener) reset() {
	for _, w := range l.snapshot() {
		if w.onReset != nil {
			w.onReset()
		}
	}
	l.wake("", true)
}

// run keeps the LISTEN connection up until ctx ends: it connects, listens,
// hands out notifications, and after a lost connection waits (poll,
// doubling up to 5 seconds, jittered) and connects again. Each time it is
// listening again (and the first time, unless Open waited for it) it
// resets the watchers and wakes every waiter: what was notified meanwhile
// is lost. While it is down, waiters are woken every poll.
func (l *listener) run(ctx context.Context) {
	defer close(l.done)
	wait := l.poll
	for attempt := 0; ctx.Err() == nil; attempt++ {
		conn, err := l.listen(ctx)
		if err == nil {
			wait = l.poll
			if l.setUp(true) || attempt > 0 {
				l.reset()
			}
		}
		if attempt == 0 {
			close(l.first)
		}
		if err == nil {
			for {
				n, err := conn.WaitForNotification(ctx)
				if err != nil {
					break
				}
				if n.Channel == l.channel {
					l.dispatch(n.Payload)
				}
			}
			l.setUp(false)
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(cctx)
			cancel()
			l.wake("", true)
		}
		if !l.sleep(ctx, wait) {
			return
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// listen connects and LISTENs, within 5 seconds.
func (l *listener) listen(ctx context.Context) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, l.cfg)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(cctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
		_ = conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// sleep waits about d (jittered), waking the waiters every poll, and
// reports false when ctx ended.
func (l *listener) sleep(ctx context.Context, d time.Duration) bool {
	d = d/2 + rand.N(d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	tick := time.NewTicker(l.poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case <-tick.C:
			l.wake("", true)
		}
	}
}

// setUp records whether the connection listens, and reports whether the
// view was settled (in use) before.
func (l *listener) setUp(up bool) (settled bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.up = up
	return l.settled
}

// listening reports whether the connection is listening (for tests).
func (l *listener) listening() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.up
}
