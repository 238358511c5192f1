package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/jackc/pgx/v5/pgxpool"
)

// maxRowKey is the longest key stored as it is; longer keys (and keys
// that are not valid text) are stored under their SHA-256, so that every
// key fits a B-tree index entry and a notification's payload.
const maxRowKey = 512

// openWait bounds how long Open waits for the view's LISTEN connection.
const openWait = 2 * time.Second

// hashedKey starts the stored form of a hashed key. Keys that start with
// it are hashed too, so that the two forms never meet.
const hashedKey = "#sha256:"

// rowKey returns the form under which key is stored and notified.
func rowKey(key string) string {
	if len(key) <= maxRowKey && isText(key) && !strings.HasPrefix(key, hashedKey) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return hashedKey + hex.EncodeToString(sum[:])
}

// shared is one pipeline's view of a [Backend]; see [backend.Shared].
type shared struct {
	b         *Backend
	ns        string
	channel   string
	heartbeat time.Duration

	l *listener

	stopSweep func() // ends the sweeper and waits for it

	cleanups sync.WaitGroup // token-checked deletes after acquires of unknown outcome

	closeOnce sync.Once
}

var (
	_ backend.Shared     = (*shared)(nil)
	_ backend.SharedMany = (*shared)(nil)
	_ backend.Holder     = (*shared)(nil)
)

func newShared(b *Backend, s backend.Scope) (*shared, error) {
	hb := s.Heartbeat
	if hb == 0 {
		hb = backend.DefaultHeartbeat
	}
	sh := &shared{b: b, ns: s.Namespace, channel: channelOf(b.q.listenName, s.Namespace), heartbeat: hb}
	sh.l = newListener(b.listen.Copy(), sh.channel, b.o.Poll)
	start := time.Now()
	// Migrate now, while the LISTEN connection comes up, rather than in
	// the first operations, which a start-up burst would make wait for
	// it: a failure leaves it to them.
	mctx, cancel := context.WithTimeout(context.Background(), openWait)
	_ = b.Migrate(mctx)
	cancel()
	sh.l.awaitFirst(openWait - time.Since(start))
	sh.stopSweep = startSweeper(b, b.o.Sweep)
	return sh, nil
}

// System returns "postgresql", for span attributes.
func (s *shared) System() string { return "postgresql" }

// Subscribed reports whether the view's LISTEN connection is up: without
// it, waiters are woken by polls and other processes' announcements are
// not heard (the pipeline's Health.Subscribed).
func (s *shared) Subscribed() bool { return s.l.listening() }

// Close stops the LISTEN connection and the sweeper, and waits for the
// cleanups of acquires whose outcome was unknown. It does not close the
// pool. Closing twice returns nil.
func (s *shared) Close() error {
	s.closeOnce.Do(func() {
		s.l.close()
		s.stopSweep()
		s.cleanups.Wait()
	})
	return nil
}

// Ping checks that the database answers through the pool.
func (s *shared) Ping(ctx context.Context) error {
	cctx, err := s.b.withConn(ctx, func(ctx context.Context, c *pgxpool.Conn) error { return c.Ping(ctx) })
	if err != nil {
		return s.storeErr(cctx, "ping", err)
	}
	return nil
}

// Load implements [backend.Store]. Concurrent calls on one [Backend] share
// a statement (see batcher).
func (s *shared) Load(ctx context.Context, key string) ([]byte, error) {
	if err := s.b.ready(ctx); err != nil {
		return nil, s.storeErr(ctx, "load", err)
	}
	cctx, r := s.b.load(ctx, s.ns, rowKey(key))
	if r.err != nil {
		return nil, s.storeErr(cctx, "load", r.err)
	}
	if !r.found {
		return nil, nil
	}
	if r.data == nil {
		return []byte{}, nil
	}
	return r.data, nil
}

// LoadMany implements [backend.SharedMany]: the keys go to the
// statements of loads (see batcher) all at once, so that a batch of
// thousands of keys runs in a few statements of many keys each, beside
// the other callers' loads.
func (s *shared) LoadMany(ctx context.Context, keys []string) ([][]byte, error) {
	if err := s.b.ready(ctx); err != nil {
		return nil, s.storeErr(ctx, "load", err)
	}
	rks := make([]string, len(keys))
	for i, k := range keys {
		rks[i] = rowKey(k)
	}
	cctx, rs := s.b.loadAll(ctx, s.ns, rks)
	out := make([][]byte, len(keys))
	for i, r := range rs {
		switch {
		case r.err != nil:
			return nil, s.storeErr(cctx, "load", r.err)
		case !r.found:
		case r.data == nil:
			out[i] = []byte{}
		default:
			out[i] = r.data
		}
	}
	return out, nil
}

// Save implements [backend.Store] in one statement (one round trip), which
// concurrent calls on one [Backend] share (see batcher): the
// lock check, the fenced write, and with Release the lock's release and
// the waiters' notification, in one transaction. The value lives until
// w.Until, counted on the database's clock from the time left now.
func (s *shared) Save(ctx context.Context, key string, raw []byte, w backend.Save) (bool, error) {
	if w.Release && w.Token == "" {
		return false, errors.New("postgres: save: Release without a Token")
	}
	if raw == nil {
		raw = []byte{}
	}
	if err := s.b.ready(ctx); err != nil {
		return false, s.storeErr(ctx, "save", err)
	}
	ttl := time.Until(w.Until).Microseconds()
	rk := rowKey(key)
	cctx, r := s.b.save(ctx, &saveCall{ns: s.ns, key: rk, token: w.Token, fence: w.Fence, ttlUS: ttl, data: raw,
		release: w.Release, channel: s.channel, payload: wakePayload(rk)})
	n, err := r.n, r.err
	if err != nil {
		return false, s.storeErr(cctx, "save", err)
	}
	if n < 0 {
		return false, fmt.Errorf("postgres: save: %w", backend.ErrLockLost)
	}
	return n == 1, nil
}

// NextFence implements [backend.Store] in one statement.
func (s *shared) NextFence(ctx context.Context, key string, revoke bool) (int64, error) {
	if err := s.b.ready(ctx); err != nil {
		return 0, s.storeErr(ctx, "fence", err)
	}
	rk := rowKey(key)
	var f int64
	cctx, err := s.b.queryRow(ctx, s.b.q.nextFence, []any{s.ns, rk, revoke, s.channel, wakePayload(rk)}, &f)
	if err != nil {
		return 0, s.storeErr(cctx, "fence", err)
	}
	return f, nil
}

// Notify implements [backend.Shared].
func (s *shared) Notify(ctx context.Context, key string) error {
	rk := rowKey(key)
	if _, cctx, err := s.b.exec(ctx, s.b.q.notify, s.channel, wakePayload(rk)); err != nil {
		return s.storeErr(cctx, "notify", err)
	}
	return nil
}

// Announce implements [backend.Shared].
func (s *shared) Announce(ctx context.Context, key, origin string) error {
	if _, cctx, err := s.b.exec(ctx, s.b.q.notify, s.channel, announcePayload(key, origin)); err != nil {
		return s.storeErr(cctx, "announce", err)
	}
	return nil
}

// Subscribe implements [backend.Shared].
func (s *shared) Subscribe(key string) (<-chan struct{}, func()) {
	return s.l.subscribe(rowKey(key))
}

// Watch implements [backend.Shared].
func (s *shared) Watch(onWrite func(key, origin string), onReset func()) func() {
	return s.l.watch(onWrite, onReset)
}

// storeErr returns the context's error when ctx has ended, and err
// wrapped otherwise.
func (s *shared) storeErr(ctx context.Context, op string, err error) error {
	s.b.lost(err)
	return storeErr(ctx, op, err)
}

// storeErr names the operation, never the key: keys may be secrets.
func storeErr(ctx context.Context, op string, err error) error {
	if cerr := ctxErr(ctx); cerr != nil {
		return fmt.Errorf("postgres: %s: %w", op, cerr)
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}

// ctxErr is ctx's error, or DeadlineExceeded when its deadline has passed
// a hair before its own timer fired (a socket deadline taken from ctx).
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}
