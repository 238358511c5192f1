package rlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/rkey"
)

// testCtx returns a context that bounds one test's Redis calls.
func testCtx(t *testing.T) context.Context { return redistest.Context(t, 20*time.Second) }

// namespace returns a namespace of the test's own, new for each run, on
// the package server.
func namespace(t *testing.T) string { return redistest.Namespace(t) }

// newLocker returns a locker on client in a namespace of the test's run.
func newLocker(t *testing.T, client RedisClient) *Redis {
	t.Helper()
	l, err := NewRedis(client, RedisOptions{Namespace: namespace(t)})
	if err != nil {
		t.Fatalf("NewRedis: %v", err)
	}
	return l
}

// expireNow ends key's lease in Redis at once, as its running out would:
// the lock key is expired (PEXPIREAT in the past deletes it), its fence
// counter kept. Waiting for a short lease to run out would put the wall
// clock in the test.
func expireNow(t *testing.T, l *Redis, key string) {
	t.Helper()
	if err := rdb.PExpireAt(testCtx(t), l.keys.Lock(key), time.UnixMilli(1)).Err(); err != nil {
		t.Fatal(err)
	}
}

func acquire(t *testing.T, l *Redis, key string, lease time.Duration) *backend.Lease {
	t.Helper()
	ls, err := l.TryAcquire(testCtx(t), key, lease)
	if err != nil {
		t.Fatalf("TryAcquire(%q) = %v", key, err)
	}
	return ls
}

// lockKeys returns the lock keys of l's namespace left in Redis, once l's
// background deletes have ended.
func lockKeys(t *testing.T, c redis.UniversalClient, l *Redis) []string {
	t.Helper()
	l.Wait()
	keys, err := c.Keys(testCtx(t), l.keys.Lock("*")).Result()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	return keys
}

// TestNewRedis_invalid parallels cache's: each package checks its own
// constructor's options and messages.
func TestNewRedis_invalid(t *testing.T) {
	tests := []struct {
		name    string
		client  RedisClient
		o       RedisOptions
		wantErr string
	}{
		{"nil client", nil, RedisOptions{Namespace: "n"}, "lock: redis client is nil"},
		{"empty namespace", rdb, RedisOptions{}, "lock: rkey: namespace is required"},
		{"brace in prefix", rdb, RedisOptions{Prefix: "{x}", Namespace: "n"}, "must not contain braces"},
		{"negative heartbeat", rdb, RedisOptions{Namespace: "n", Heartbeat: -time.Second}, "must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := NewRedis(tt.client, tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || l != nil {
				t.Fatalf("NewRedis() = %v, %v; want nil, error containing %q", l, err, tt.wantErr)
			}
		})
	}
}

func TestRedisLock_TryAcquire_invalidArgs(t *testing.T) {
	l := newLocker(t, rdb)
	for _, tt := range []struct {
		key   string
		lease time.Duration
	}{{"", time.Second}, {"k", 0}, {"k", -time.Second}} {
		if _, err := l.TryAcquire(testCtx(t), tt.key, tt.lease); err == nil || errors.Is(err, backend.ErrBackend) {
			t.Errorf("TryAcquire(%q, %v) error = %v, want an argument error", tt.key, tt.lease, err)
		}
	}
}

func TestRedisLock_TryAcquire_heldByAnother(t *testing.T) {
	l := newLocker(t, rdb)
	ctx := testCtx(t)
	a := acquire(t, l, "k", time.Minute)
	if b, err := l.TryAcquire(ctx, "k", time.Minute); !errors.Is(err, backend.ErrNotAcquired) || b != nil {
		t.Fatalf("second TryAcquire() = %v, %v; want nil, backend.ErrNotAcquired", b, err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	b := acquire(t, l, "k", time.Minute)
	if b.Token() == a.Token() {
		t.Fatal("two grants share a token")
	}
	if err := b.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
}

func TestRedisLock_TryAcquire_storesTokenAndLease(t *testing.T) {
	l := newLocker(t, rdb)
	ctx := testCtx(t)
	ls := acquire(t, l, "k", 10*time.Second)
	defer ls.Release(ctx)
	tok, err := rdb.HGet(ctx, l.keys.Lock("k"), "t").Result()
	if err != nil || tok != ls.Token() {
		t.Fatalf("lock key holds %q, %v; want the lease's token %q", tok, err, ls.Token())
	}
	if pttl := rdb.PTTL(ctx, l.keys.Lock("k")).Val(); pttl <= 9*time.Second || pttl > 10*time.Second {
		t.Fatalf("lock PTTL = %v, want just under the 10s lease", pttl)
	}
	if ls.Key() != "k" || ls.TTL() != 10*time.Second {
		t.Fatalf("lease key %q ttl %v", ls.Key(), ls.TTL())
	}
}

func TestRedisLock_Release_afterLeaseExpired(t *testing.T) {
	l := newLocker(t, rdb)
	ctx := testCtx(t)
	a := acquire(t, l, "k", time.Minute)
	expireNow(t, l, "k")
	b := acquire(t, l, "k", time.Minute)
	if err := a.Release(ctx); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("expired lease Release() = %v, want backend.ErrNotHeld", err)
	}
	if held, _, err := l.Inspect(ctx, "k"); err != nil || !held {
		t.Fatalf("Inspect() after the stale release = %v, %v; want the successor's lock intact", held, err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatalf("successor Release() = %v", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatalf("second Release() = %v, want nil", err)
	}
}

func TestRedisLock_Release_afterExpiryWithoutSuccessor(t *testing.T) {
	l := newLocker(t, rdb)
	a := acquire(t, l, "k", time.Minute)
	expireNow(t, l, "k")
	if err := a.Release(testCtx(t)); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("Release() = %v, want backend.ErrNotHeld", err)
	}
}

func TestRedisLock_Extend(t *testing.T) {
	l := newLocker(t, rdb)
	ctx := testCtx(t)
	a := acquire(t, l, "k", time.Second)
	if err := a.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend() = %v", err)
	}
	if _, rem, err := l.Inspect(ctx, "k"); err != nil || rem <= 59*time.Second {
		t.Fatalf("Inspect() after Extend remaining = %v, %v; want about a minute", rem, err)
	}
	if err := a.Extend(ctx, 0); err == nil || errors.Is(err, backend.ErrBackend) {
		t.Fatalf("Extend(0) = %v, want an argument error", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Extend(ctx, time.Minute); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("Extend() after Release = %v, want backend.ErrNotHeld", err)
	}
}

func TestRedisLock_Extend_afterLeaseExpired(t *testing.T) {
	l := newLocker(t, rdb)
	ctx := testCtx(t)
	a := acquire(t, l, "k", time.Minute)
	expireNow(t, l, "k")
	b := acquire(t, l, "k", time.Minute)
	defer b.Release(ctx)
	if err := a.Extend(ctx, time.Minute); !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("stale Extend() = %v, want backend.ErrNotHeld", err)
	}
	if tok := rdb.HGet(ctx, l.keys.Lock("k"), "t").Val(); tok != b.Token() {
		t.Fatalf("lock holds %q after a stale extend, want the successor's token", tok)
	}
}

func TestRedisLock_KeepAlive_outlivesLease(t *testing.T) {
	l := newLocker(t, rdb)
	ctx := testCtx(t)
	a := acquire(t, l, "k", 300*time.Millisecond)
	lost := make(chan error, 1)
	a.KeepAlive(ctx, func(err error) { lost <- err })
	// The watchdog's beats (the hash's h field, rewritten by each) are the
	// events waited for: the lock must still be the lease's at each of
	// them, past three leases from the grant.
	beats := map[string]bool{}
	for start := time.Now(); time.Since(start) < 3*a.TTL() || len(beats) < 4; time.Sleep(5 * time.Millisecond) {
		cur, err := rdb.HMGet(ctx, l.keys.Lock("k"), "t", "h").Result()
		if err != nil || cur[0] != a.Token() {
			t.Fatalf("the lock after %v: %v, %v; want the lease's token", time.Since(start), cur, err)
		}
		beats[fmt.Sprint(cur[1])] = true
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%d beats in 10s", len(beats))
		}
	}
	if _, err := l.TryAcquire(ctx, "k", time.Minute); !errors.Is(err, backend.ErrNotAcquired) {
		t.Fatalf("TryAcquire() while the watchdog runs = %v, want backend.ErrNotAcquired", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	select {
	case err := <-lost:
		t.Fatalf("watchdog reported the lease lost: %v", err)
	default:
	}
}

func TestRedisLock_Inspect(t *testing.T) {
	l := newLocker(t, rdb)
	ctx := testCtx(t)
	if held, rem, err := l.Inspect(ctx, "k"); err != nil || held || rem != 0 {
		t.Fatalf("Inspect() of a free key = %v, %v, %v", held, rem, err)
	}
	a := acquire(t, l, "k", 5*time.Second)
	if held, rem, err := l.Inspect(ctx, "k"); err != nil || !held || rem <= 4*time.Second || rem > 5*time.Second {
		t.Fatalf("Inspect() of a held key = %v, %v, %v", held, rem, err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, l.keys.Lock("manual"), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if held, rem, err := l.Inspect(ctx, "manual"); err != nil || !held || rem != 0 {
		t.Fatalf("Inspect() of a lock without expiry = %v, %v, %v; want held, 0", held, rem, err)
	}
}

func TestRedisLock_Fence_increasesAcrossGrants(t *testing.T) {
	l := newLocker(t, rdb)
	ctx := testCtx(t)
	var last int64
	for i := range 5 {
		a := acquire(t, l, "k", time.Minute)
		if a.Fence() <= last {
			t.Fatalf("grant %d has fence %d, not above the previous %d", i, a.Fence(), last)
		}
		last = a.Fence()
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A grant after an expiry (not a release) is fenced too.
	a := acquire(t, l, "k", time.Minute)
	expireNow(t, l, "k")
	b := acquire(t, l, "k", time.Minute)
	defer b.Release(ctx)
	if b.Fence() <= a.Fence() {
		t.Fatalf("successor fence %d is not above %d", b.Fence(), a.Fence())
	}
}

func TestRedisLock_Fence_retainedPastLease(t *testing.T) {
	l, err := NewRedis(rdb, RedisOptions{Namespace: namespace(t), FenceRetention: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	a := acquire(t, l, "k", 10*time.Second)
	if pttl := rdb.PTTL(ctx, l.keys.Fence("k")).Val(); pttl <= 69*time.Second || pttl > 70*time.Second {
		t.Fatalf("fence PTTL = %v, want lease + retention (70s)", pttl)
	}
	if err := a.Extend(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if pttl := rdb.PTTL(ctx, l.keys.Fence("k")).Val(); pttl <= 89*time.Second {
		t.Fatalf("fence PTTL after Extend = %v, want lease + retention (90s)", pttl)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRedisLock_Fence_staysAboveStoredValue(t *testing.T) {
	l := newLocker(t, rdb)
	ctx := testCtx(t)
	// The counter has expired but a value written under a fence ahead of
	// the clock lives on.
	const stored = 5_000_000_000_000_000
	if err := rdb.HSet(ctx, l.keys.Value("k"), rkey.FieldFence, stored, rkey.FieldData, "x").Err(); err != nil {
		t.Fatal(err)
	}
	a := acquire(t, l, "k", time.Minute)
	defer a.Release(ctx)
	if a.Fence() != stored+1 {
		t.Fatalf("fence = %d, want %d (above the stored value's)", a.Fence(), int64(stored+1))
	}
	if got := rdb.Get(ctx, l.keys.Fence("k")).Val(); got != "5000000000000001" {
		t.Fatalf("fence counter = %q, want 5000000000000001", got)
	}
}

// A look that reads the value takes its fence in the same read, and stays
// above it as a plain acquire does.
func TestRedisLock_Fence_staysAboveStoredValue_withTheRead(t *testing.T) {
	l := newLocker(t, rdb)
	ctx := testCtx(t)
	const stored = 5_000_000_000_000_000
	if err := rdb.HSet(ctx, l.keys.Value("k"), rkey.FieldFence, stored, rkey.FieldData, "x",
		rkey.FieldExpires, time.Now().Add(-time.Minute).UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	a, v, fresh, err := l.TryAcquireOrGet(ctx, "k", time.Minute, time.Now())
	if err != nil || a == nil || fresh || string(v) != "x" {
		t.Fatalf("TryAcquireOrGet() = %v, %q, %v, %v; want a grant beside the stale value", a, v, fresh, err)
	}
	defer a.Release(ctx)
	if a.Fence() != stored+1 {
		t.Fatalf("fence = %d, want %d (above the stored value's)", a.Fence(), int64(stored+1))
	}
}

func TestRedisLock_TryAcquire_retriedScriptIsIdempotent(t *testing.T) {
	// go-redis retries a command whose connection broke; the retry of an
	// acquire that did run must return the same grant, not backend.ErrNotAcquired.
	l := newLocker(t, rdb)
	ctx := testCtx(t)
	keys := []string{l.keys.Lock("k"), l.keys.Fence("k"), l.keys.Value("k")}
	run := func(tok string) int64 {
		r, err := acquireScript.Run(ctx, rdb, keys, tok, 60000, 120000, rkey.FieldFence, 2000,
			0, rkey.FieldData, rkey.FieldExpires).Slice()
		if err != nil {
			t.Fatal(err)
		}
		return r[0].(int64)
	}
	first := run("tok-a")
	if again := run("tok-a"); again != first {
		t.Fatalf("retry returned fence %d, want the first grant's %d", again, first)
	}
	if other := run("tok-b"); other != 0 {
		t.Fatalf("another token got fence %d, want 0 (not acquired)", other)
	}
}

func TestRedisLock_TryAcquire_canceledContext(t *testing.T) {
	l := newLocker(t, rdb)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := l.TryAcquire(ctx, "k", time.Minute)
	if !errors.Is(err, context.Canceled) || errors.Is(err, backend.ErrBackend) || errors.Is(err, backend.ErrNotAcquired) {
		t.Fatalf("TryAcquire() = %v, want only context.Canceled", err)
	}
	if keys := lockKeys(t, rdb, l); len(keys) != 0 {
		t.Fatalf("lock keys left: %q", keys)
	}
}

// TestRedisLock_TryAcquire_cancelStorm cancels 1,000 acquires at random
// points, with a client whose socket I/O honours the contexts, so that some
// scripts take the lock in Redis after their caller has given up. None may
// leave a lock behind.
func TestRedisLock_TryAcquire_cancelStorm(t *testing.T) {
	c := srv.Client(func(o *redis.Options) {
		o.ContextTimeoutEnabled = true
		o.PoolSize = 32
	})
	// Holders here never beat: a heartbeat of a third of the lease keeps
	// a slow run on a busy machine from taking over its own grants.
	l, err := NewRedis(c, RedisOptions{Namespace: namespace(t), Heartbeat: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	// Fill the pool first: with a cold pool, nearly every acquire would end
	// while dialling, before its script reached Redis.
	var warm sync.WaitGroup
	for range 32 {
		warm.Add(1)
		// Each goroutine ends after one PING, bounded by ctx.
		go func() { defer warm.Done(); _ = c.Ping(ctx).Err() }()
	}
	warm.Wait()
	const goroutines, keys = 1000, 64
	st := cancelStorm(t, l, goroutines, keys)
	// The deletes after unknown outcomes run in the background.
	l.Wait()
	for _, ls := range st.leases {
		if err := ls.Release(ctx); err != nil {
			t.Errorf("Release() = %v", err)
		}
	}
	// Every grant Redis made incremented a fence counter; those the callers
	// never saw were acquires with an unknown outcome, which cleanup undid.
	var grants int64
	for i := range keys {
		n, err := rdb.Get(ctx, l.keys.Fence(fmt.Sprintf("k%d", i))).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		grants += n
	}
	unseen := grants - int64(len(st.leases))
	t.Logf("%d granted, %d busy, %d cancelled; %d grants made in Redis after the caller gave up",
		len(st.leases), st.busy, st.cancelled, unseen)
	if st.unwanted > 0 {
		t.Errorf("%d acquires failed with neither backend.ErrNotAcquired nor only a ctx error; first: %v",
			st.unwanted, st.firstUnwanted)
	}
	if st.cancelled == 0 || len(st.leases) == 0 {
		t.Fatal("the storm needs both granted and cancelled acquires to test anything")
	}
	if left := lockKeys(t, rdb, l); len(left) != 0 {
		t.Fatalf("cancelled acquires orphaned %d lock(s): %q", len(left), left)
	}
}

type stormResult struct {
	leases                    []*backend.Lease
	busy, cancelled, unwanted int
	firstUnwanted             error
}

// cancelStorm runs n concurrent acquires over keys keys, each with a context
// that ends after a random delay of up to 10ms, half by deadline and half by
// cancellation.
func cancelStorm(t *testing.T, l *Redis, n, keys int) *stormResult {
	t.Helper()
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex // guards res
		res stormResult
	)
	for i := range n {
		wg.Add(1)
		// Each goroutine ends after one TryAcquire, which its ctx and the
		// cleanup timeout bound.
		go func() {
			defer wg.Done()
			var ctx context.Context
			var cancel context.CancelFunc
			delay := time.Duration(rand.Int64N(int64(10 * time.Millisecond)))
			if i%2 == 0 {
				ctx, cancel = context.WithTimeout(context.Background(), delay)
			} else {
				ctx, cancel = context.WithCancel(context.Background())
				stop := time.AfterFunc(delay, cancel)
				defer stop.Stop()
			}
			defer cancel()
			ls, err := l.TryAcquire(ctx, fmt.Sprintf("k%d", i%keys), time.Minute)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				res.leases = append(res.leases, ls)
			case errors.Is(err, backend.ErrNotAcquired):
				res.busy++
			case (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) &&
				!errors.Is(err, backend.ErrBackend):
				res.cancelled++
			default:
				res.unwanted++
				if res.firstUnwanted == nil {
					res.firstUnwanted = err
				}
			}
		}()
	}
	wg.Wait()
	return &res
}

// lostReply is a client whose next script call runs in Redis but whose reply
// is lost, as when a connection breaks after the command was sent: a fault
// that a real server cannot be made to produce on cue.
type lostReply struct {
	*redis.Client
	armed  atomic.Bool
	cancel context.CancelFunc // if not nil, called as the reply is lost
}

func (c *lostReply) lose(ctx context.Context, cmd *redis.Cmd) *redis.Cmd {
	if cmd.Err() != nil || !c.armed.CompareAndSwap(true, false) {
		return cmd
	}
	if c.cancel != nil {
		c.cancel()
	}
	lost := redis.NewCmd(ctx)
	lost.SetErr(io.ErrUnexpectedEOF)
	return lost
}

func (c *lostReply) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return c.lose(ctx, c.Client.EvalSha(ctx, sha, keys, args...))
}

func (c *lostReply) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return c.lose(ctx, c.Client.Eval(ctx, script, keys, args...))
}

func TestRedisLock_TryAcquire_lostReplyLeavesNoLock(t *testing.T) {
	tests := []struct {
		name      string
		cancelCtx bool
		want      error
	}{
		{"connection broke", false, backend.ErrBackend},
		{"ctx cancelled in flight", true, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			c := &lostReply{Client: rdb}
			if tt.cancelCtx {
				c.cancel = cancel
			}
			c.armed.Store(true)
			l := newLocker(t, c)
			_, err := l.TryAcquire(ctx, "k", time.Minute)
			if !errors.Is(err, tt.want) {
				t.Fatalf("TryAcquire() = %v, want %v", err, tt.want)
			}
			if c.armed.Load() {
				t.Fatal("the fault never fired: the test exercised nothing")
			}
			if n := rdb.Get(testCtx(t), l.keys.Fence("k")).Val(); n == "" {
				t.Fatal("no fence counter: the script did not run in Redis")
			}
			if left := lockKeys(t, rdb, l); len(left) != 0 {
				t.Fatalf("an acquire with a lost reply orphaned %q", left)
			}
		})
	}
}

func TestRedisLock_redisKilled(t *testing.T) {
	s := redistest.Start(t)
	l := newLocker(t, s.Client(func(o *redis.Options) { o.MaxRetries = -1 }))
	ctx := testCtx(t)
	held := acquire(t, l, "held", time.Minute)
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		op   string
		call func() error
	}{
		{"acquire", func() error { _, err := l.TryAcquire(ctx, "k", time.Minute); return err }},
		{"release", func() error { return held.Release(ctx) }},
		{"extend", func() error { return held.Extend(ctx, time.Minute) }},
		{"inspect", func() error { _, _, err := l.Inspect(ctx, "k"); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.op, func(t *testing.T) {
			err := tt.call()
			var be *backend.BackendError
			if !errors.As(err, &be) || be.Op != tt.op || !errors.Is(err, backend.ErrBackend) {
				t.Fatalf("%s with Redis down = %v, want a backend.BackendError for %q", tt.op, err, tt.op)
			}
			if errors.Is(err, backend.ErrNotAcquired) || errors.Is(err, backend.ErrNotHeld) || errors.Is(err, context.Canceled) {
				t.Fatalf("%s with Redis down = %v, which also matches another outcome", tt.op, err)
			}
			if !strings.HasPrefix(err.Error(), "lock: "+tt.op+": backend failed") {
				t.Fatalf("error text %q lacks the package prefix", err)
			}
		})
	}
	// Back up (empty, with no scripts loaded): locking works again.
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	a := acquire(t, l, "k", time.Minute)
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release() after restart = %v", err)
	}
}

func TestRedisLock_redisPaused(t *testing.T) {
	s := redistest.Start(t)
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Run("ctx deadline first", func(t *testing.T) {
		l := newLocker(t, s.Client(func(o *redis.Options) {
			o.ContextTimeoutEnabled = true
			o.MaxRetries = -1
		}))
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := l.TryAcquire(ctx, "k", time.Minute)
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, backend.ErrBackend) {
			t.Fatalf("TryAcquire() = %v, want only context.DeadlineExceeded", err)
		}
	})
	t.Run("read timeout first", func(t *testing.T) {
		l := newLocker(t, s.Client(func(o *redis.Options) {
			o.ReadTimeout = 100 * time.Millisecond
			o.MaxRetries = -1
		}))
		_, err := l.TryAcquire(testCtx(t), "k", time.Minute)
		if !errors.Is(err, backend.ErrBackend) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("TryAcquire() = %v, want a backend.BackendError", err)
		}
	})
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
}

func TestRedisLock_cluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	cc := c.Client()
	l := newLocker(t, cc)
	ctx := testCtx(t)
	masters := map[string]bool{}
	for i := range 12 {
		key := fmt.Sprintf("key-%d", i)
		a := acquire(t, l, key, time.Minute)
		if _, err := l.TryAcquire(ctx, key, time.Minute); !errors.Is(err, backend.ErrNotAcquired) {
			t.Fatalf("%s: second TryAcquire() = %v, want backend.ErrNotAcquired", key, err)
		}
		if err := a.Extend(ctx, 2*time.Minute); err != nil {
			t.Fatalf("%s: Extend() = %v", key, err)
		}
		if held, rem, err := l.Inspect(ctx, key); err != nil || !held || rem <= time.Minute {
			t.Fatalf("%s: Inspect() = %v, %v, %v", key, held, rem, err)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatalf("%s: Release() = %v", key, err)
		}
		b := acquire(t, l, key, time.Minute)
		if b.Fence() <= a.Fence() {
			t.Fatalf("%s: fence %d after %d", key, b.Fence(), a.Fence())
		}
		if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}
		m, err := cc.MasterForKey(ctx, l.keys.Lock(key))
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true
	}
	if len(masters) < 2 {
		t.Fatalf("12 keys landed on %d master(s); the test does not exercise slots", len(masters))
	}
}
