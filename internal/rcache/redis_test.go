package rcache

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/rkey"
)

type user struct {
	ID   int    `json:"id"`
	Name string `json:"name"`
}

// testCtx returns a context that bounds one test's Redis calls.
func testCtx(t *testing.T) context.Context { return redistest.Context(t, 10*time.Second) }

// namespace returns a namespace for t's keys on the package server.
func namespace(t *testing.T) string { return redistest.Namespace(t) }

// newStore returns a store on the package server in a namespace of its own.
func newStore[V any](t *testing.T, o RedisOptions) *Redis[V] {
	t.Helper()
	if o.Namespace == "" {
		o.Namespace = namespace(t)
	}
	r, err := NewRedis[V](rdb, o)
	if err != nil {
		t.Fatalf("NewRedis: %v", err)
	}
	return r
}

func entry[V any](v V, fence int64) Entry[V] {
	now := time.Now()
	return Entry[V]{
		Value: v, Written: now, Expires: now.Add(time.Minute), StaleUntil: now.Add(time.Hour),
		LoadDuration: 3 * time.Millisecond, Fence: fence,
	}
}

// TestNewRedis_invalid parallels lock's: each package checks its own
// constructor's options and messages.
func TestNewRedis_invalid(t *testing.T) {
	tests := []struct {
		name    string
		client  RedisClient
		o       RedisOptions
		wantErr string
	}{
		{"nil client", nil, RedisOptions{Namespace: "n"}, "cache: redis client is nil"},
		{"empty namespace", rdb, RedisOptions{}, "cache: rkey: namespace is required"},
		{"brace in prefix", rdb, RedisOptions{Prefix: "{", Namespace: "n"}, "must not contain braces"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewRedis[string](tt.client, tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || r != nil {
				t.Fatalf("NewRedis() = %v, %v; want nil, error containing %q", r, err, tt.wantErr)
			}
		})
	}
}

func TestRedis_Get_missing(t *testing.T) {
	r := newStore[user](t, RedisOptions{})
	e, f, err := r.Get(testCtx(t), "nobody")
	if err != nil || f != Miss || e != (Entry[user]{}) {
		t.Fatalf("Get() = %+v, %v, %v; want zero, miss, nil", e, f, err)
	}
}

func TestRedis_SetGet_roundTrip(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name  string
		e     Entry[user]
		wantF Freshness
	}{
		{"fresh value", entry(user{ID: 1, Name: "ada"}, 3), Fresh},
		{"zero value", entry(user{}, 0), Fresh},
		{"not found", Entry[user]{NotFound: true, Written: now, Expires: now.Add(time.Minute), StaleUntil: now.Add(time.Minute)}, Fresh},
		{"stale value", Entry[user]{Value: user{ID: 2}, Written: now.Add(-time.Hour), Expires: now.Add(-time.Second), StaleUntil: now.Add(time.Minute), Fence: 9}, Stale},
	}
	r := newStore[user](t, RedisOptions{})
	ctx := testCtx(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stored, err := r.Set(ctx, tt.name, tt.e)
			if err != nil || !stored {
				t.Fatalf("Set() = %v, %v; want true, nil", stored, err)
			}
			got, f, err := r.Get(ctx, tt.name)
			if err != nil || f != tt.wantF {
				t.Fatalf("Get() freshness %v, err %v; want %v, nil", f, err, tt.wantF)
			}
			if got.Value != tt.e.Value || got.NotFound != tt.e.NotFound || got.Fence != tt.e.Fence ||
				got.LoadDuration != tt.e.LoadDuration || !got.Written.Equal(tt.e.Written) ||
				!got.Expires.Equal(tt.e.Expires) || !got.StaleUntil.Equal(tt.e.StaleUntil) {
				t.Fatalf("Get() = %+v, want %+v", got, tt.e)
			}
		})
	}
}

func TestRedis_Set_ttl(t *testing.T) {
	// Minutes apart, so that only a hang between Set and PTTL could blur
	// the two cases.
	tests := []struct {
		name                string
		expires, staleUntil time.Duration // from now
		want                time.Duration
	}{
		{"stale-until decides", 5 * time.Minute, 10 * time.Minute, 10 * time.Minute},
		{"expires when stale-until is earlier", 10 * time.Minute, 5 * time.Minute, 10 * time.Minute},
	}
	r := newStore[string](t, RedisOptions{})
	ctx := testCtx(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Now()
			e := Entry[string]{Value: "v", Written: now, Expires: now.Add(tt.expires), StaleUntil: now.Add(tt.staleUntil)}
			if _, err := r.Set(ctx, tt.name, e); err != nil {
				t.Fatal(err)
			}
			pttl, err := rdb.PTTL(ctx, r.keys.Value(tt.name)).Result()
			if err != nil {
				t.Fatal(err)
			}
			if pttl <= tt.want-time.Minute || pttl > tt.want {
				t.Fatalf("PTTL = %v, want just under %v", pttl, tt.want)
			}
		})
	}
}

func TestRedis_Set_expiredEntry(t *testing.T) {
	r := newStore[string](t, RedisOptions{})
	e := entry("v", 0)
	e.Expires = time.Now().Add(-time.Second)
	e.StaleUntil = e.Expires
	stored, err := r.Set(testCtx(t), "k", e)
	if !errors.Is(err, ErrExpiredEntry) || stored {
		t.Fatalf("Set() = %v, %v; want false, ErrExpiredEntry", stored, err)
	}
}

func TestRedis_Get_pastStaleUntilIsMiss(t *testing.T) {
	r := newStore[string](t, RedisOptions{})
	ctx := testCtx(t)
	// An entry whose stale-until has passed, kept alive in Redis as clock
	// skew between writer and reader would: the envelope's times still
	// decide. Set refuses such an entry, so it is written directly.
	past := time.Now().Add(-time.Second)
	raw := encodeEnvelope(envelope{written: past.Add(-time.Minute), expires: past, staleUntil: past, payload: []byte(`"v"`)})
	if err := rdb.HSet(ctx, r.keys.Value("k"), rkey.FieldData, raw).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.PExpire(ctx, r.keys.Value("k"), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, f, err := r.Get(ctx, "k"); err != nil || f != Miss {
		t.Fatalf("Get() = %v, %v; want miss, nil", f, err)
	}
	if r.Corrupted() != 0 {
		t.Fatalf("Corrupted() = %d: the entry decoded badly, so the test proved nothing", r.Corrupted())
	}
}

func TestRedis_Set_fencing(t *testing.T) {
	type write struct {
		fence int64
		want  bool
	}
	tests := []struct {
		name    string
		counter int64 // value of the fence counter; 0: no counter key
		writes  []write
	}{
		{"lower fence refused", 5, []write{{5, true}, {4, false}}},
		{"equal fence accepted", 5, []write{{5, true}, {5, true}}},
		{"higher fence accepted", 6, []write{{5, true}, {6, true}}},
		{"unlocked write never replaces a locked one", 5, []write{{5, true}, {0, false}}},
		{"locked write replaces an unlocked one", 7, []write{{0, true}, {6, true}, {0, false}}},
		{"the counter does not rank writes", 9, []write{{3, true}, {2, false}, {3, true}}},
		{"unlocked writes without any grant", 0, []write{{0, true}, {0, true}, {1, true}}},
	}
	r := newStore[string](t, RedisOptions{})
	ctx := testCtx(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := tt.name
			if tt.counter > 0 {
				if err := rdb.Set(ctx, r.keys.Fence(key), tt.counter, time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			}
			want := ""
			for i, w := range tt.writes {
				v := fmt.Sprintf("write %d (fence %d)", i, w.fence)
				stored, err := r.Set(ctx, key, entry(v, w.fence))
				if err != nil || stored != w.want {
					t.Fatalf("%s: Set() = %v, %v; want %v, nil", v, stored, err, w.want)
				}
				if stored {
					want = v
				}
			}
			got, _, err := r.Get(ctx, key)
			if err != nil || got.Value != want {
				t.Fatalf("Get() = %q, %v; want %q", got.Value, err, want)
			}
		})
	}
}

func TestRedis_Get_corrupt(t *testing.T) {
	valid := encodeEnvelope(envelope{written: time.Now(), expires: time.Now().Add(time.Hour),
		staleUntil: time.Now().Add(time.Hour), payload: []byte(`{"id":1}`)})
	tests := []struct {
		name  string
		write func(ctx context.Context, key string) error
	}{
		{"plain string", func(ctx context.Context, key string) error {
			return rdb.Set(ctx, key, "garbage", time.Minute).Err()
		}},
		{"garbage data field", func(ctx context.Context, key string) error {
			return rdb.HSet(ctx, key, rkey.FieldData, "\x00\x01garbage").Err()
		}},
		{"truncated envelope", func(ctx context.Context, key string) error {
			return rdb.HSet(ctx, key, rkey.FieldData, valid[:20]).Err()
		}},
		{"payload the codec refuses", func(ctx context.Context, key string) error {
			bad := append(append([]byte(nil), valid[:envHeader]...), `{"id":"not a number"}`...)
			return rdb.HSet(ctx, key, rkey.FieldData, bad).Err()
		}},
		{"list", func(ctx context.Context, key string) error {
			return rdb.RPush(ctx, key, "a").Err()
		}},
	}
	var mu sync.Mutex // guards reported
	var reported []string
	r := newStore[user](t, RedisOptions{OnCorrupt: func(key string, err error) {
		mu.Lock()
		defer mu.Unlock()
		reported = append(reported, key)
	}})
	ctx := testCtx(t)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.write(ctx, r.keys.Value(tt.name)); err != nil {
				t.Fatal(err)
			}
			e, f, err := r.Get(ctx, tt.name)
			if err != nil || f != Miss || e != (Entry[user]{}) {
				t.Fatalf("Get() = %+v, %v, %v; want zero, miss, nil", e, f, err)
			}
			if got := r.Corrupted(); got != uint64(i+1) {
				t.Fatalf("Corrupted() = %d, want %d", got, i+1)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(reported) != i+1 || reported[i] != tt.name {
				t.Fatalf("OnCorrupt saw %q, want it to end with %q", reported, tt.name)
			}
			// A write replaces the corrupt value.
			if stored, err := r.Set(ctx, tt.name, entry(user{ID: 7}, 0)); err != nil || !stored {
				t.Fatalf("Set() over corrupt value = %v, %v", stored, err)
			}
			if got, f, err := r.Get(ctx, tt.name); err != nil || f != Fresh || got.Value.ID != 7 {
				t.Fatalf("Get() after rewrite = %+v, %v, %v", got, f, err)
			}
		})
	}
}

func TestRedis_Delete(t *testing.T) {
	r := newStore[string](t, RedisOptions{})
	ctx := testCtx(t)
	if _, err := r.Set(ctx, "k", entry("v", 0)); err != nil {
		t.Fatal(err)
	}
	if err := r.Delete(ctx, "k"); err != nil {
		t.Fatalf("Delete() = %v", err)
	}
	if _, f, err := r.Get(ctx, "k"); err != nil || f != Miss {
		t.Fatalf("Get() after Delete = %v, %v; want miss", f, err)
	}
	if err := r.Delete(ctx, "k"); err != nil {
		t.Fatalf("Delete() of a missing key = %v", err)
	}
}

func TestRedis_prefixAndNamespaceSeparateKeys(t *testing.T) {
	ctx := testCtx(t)
	ns := namespace(t)
	a := newStore[string](t, RedisOptions{Namespace: ns + "-a"})
	b := newStore[string](t, RedisOptions{Namespace: ns + "-b"})
	c := newStore[string](t, RedisOptions{Namespace: ns + "-a", Prefix: "other:"})
	if _, err := a.Set(ctx, "k", entry("a", 0)); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Redis[string]{b, c} {
		if _, f, err := s.Get(ctx, "k"); err != nil || f != Miss {
			t.Fatalf("Get() in another key space = %v, %v; want miss", f, err)
		}
	}
	if n, err := rdb.Exists(ctx, fmt.Sprintf("hg:{%d:%s-a:k}:v", len(ns)+2, ns)).Result(); err != nil || n != 1 {
		t.Fatalf("value key under the default prefix: exists = %d, %v", n, err)
	}
}

func TestRedis_canceledContext(t *testing.T) {
	r := newStore[string](t, RedisOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := r.Get(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get() error = %v, want context.Canceled", err)
	}
	if _, err := r.Set(ctx, "k", entry("v", 0)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Set() error = %v, want context.Canceled", err)
	}
}

func TestRedis_serverDown(t *testing.T) {
	s := redistest.Start(t)
	r, err := NewRedis[string](s.Client(func(o *redis.Options) { o.MaxRetries = -1 }), RedisOptions{Namespace: "down"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if _, f, err := r.Get(ctx, "k"); err == nil || f != Miss || !strings.HasPrefix(err.Error(), "cache: get") {
		t.Fatalf("Get() with Redis down = %v, %v; want miss and a cache error", f, err)
	}
	if _, err := r.Set(ctx, "k", entry("v", 0)); err == nil {
		t.Fatal("Set() with Redis down succeeded")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if stored, err := r.Set(ctx, "k", entry("v", 0)); err != nil || !stored {
		t.Fatalf("Set() after restart (script cache empty) = %v, %v", stored, err)
	}
}

func TestRedis_cluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	cc := c.Client()
	r, err := NewRedis[string](cc, RedisOptions{Namespace: "cluster"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	masters := map[string]bool{}
	for i := range 12 {
		key := fmt.Sprintf("key-%d", i)
		if err := cc.Set(ctx, r.keys.Fence(key), 5, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		for _, w := range []struct {
			fence int64
			want  bool
		}{{5, true}, {4, false}, {0, false}, {6, true}} {
			if stored, err := r.Set(ctx, key, entry(fmt.Sprint(w.fence), w.fence)); err != nil || stored != w.want {
				t.Fatalf("%s: Set(fence %d) = %v, %v; want %v", key, w.fence, stored, err, w.want)
			}
		}
		if got, f, err := r.Get(ctx, key); err != nil || f != Fresh || got.Value != "6" {
			t.Fatalf("%s: Get() = %q, %v, %v", key, got.Value, f, err)
		}
		m, err := cc.MasterForKey(ctx, r.keys.Value(key))
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true
	}
	if len(masters) < 2 {
		t.Fatalf("12 keys landed on %d master(s); the test does not exercise slots", len(masters))
	}
}

func TestRedis_setHeld_onlyWhileTheLockHoldsTheToken(t *testing.T) {
	r := newStore[string](t, RedisOptions{})
	ctx := testCtx(t)
	lockKey := r.keys.Lock("k")
	// The lock hash as package lock writes it: t holds the token.
	if err := rdb.HSet(ctx, lockKey, "t", "tok-a").Err(); err != nil {
		t.Fatal(err)
	}
	if stored, err := r.setHeld(ctx, "k", entry("a", 7), "tok-a"); err != nil || !stored {
		t.Fatalf("setHeld() by the holder = %v, %v; want true, nil", stored, err)
	}
	for _, lose := range []struct {
		name string
		do   func() error
	}{
		{"taken over", func() error { return rdb.HSet(ctx, lockKey, "t", "tok-b").Err() }},
		{"lost with the key", func() error { return rdb.Del(ctx, lockKey).Err() }},
		{"foreign type", func() error { return rdb.RPush(ctx, lockKey, "x").Err() }},
	} {
		if err := lose.do(); err != nil {
			t.Fatal(err)
		}
		stored, err := r.setHeld(ctx, "k", entry("late "+lose.name, 9), "tok-a")
		if stored || !errors.Is(err, ErrLockLost) {
			t.Fatalf("%s: setHeld() = %v, %v; want false, ErrLockLost", lose.name, stored, err)
		}
		_ = rdb.Del(ctx, lockKey)
	}
	if got, _, err := r.Get(ctx, "k"); err != nil || got.Value != "a" {
		t.Fatalf("Get() = %q, %v; want the holder's value", got.Value, err)
	}
}

// panicky panics in both directions, as a broken MarshalJSON or
// UnmarshalJSON would.
type panicky struct{}

func (panicky) Marshal(any) ([]byte, error) { panic("marshal boom") }
func (panicky) Unmarshal([]byte, any) error { panic("unmarshal boom") }

func TestRedis_codecPanics_areCodecErrors(t *testing.T) {
	ctx := testCtx(t)
	ns := namespace(t)
	r := newStore[string](t, RedisOptions{Namespace: ns, Codec: panicky{}})
	if _, err := r.Set(ctx, "k", entry("v", 0)); !errors.Is(err, ErrCodec) {
		t.Fatalf("Set() with a panicking codec = %v, want ErrCodec", err)
	}
	good := newStore[string](t, RedisOptions{Namespace: ns})
	if _, err := good.Set(ctx, "k", entry("v", 0)); err != nil {
		t.Fatal(err)
	}
	var corrupt []error
	r.onCorrupt = func(_ string, err error) { corrupt = append(corrupt, err) }
	if _, f, err := r.Get(ctx, "k"); err != nil || f != Miss {
		t.Fatalf("Get() with a panicking codec = %v, %v; want a miss", f, err)
	}
	if len(corrupt) != 1 || !errors.Is(corrupt[0], ErrCodec) {
		t.Fatalf("OnCorrupt got %v, want one ErrCodec", corrupt)
	}
}

// TestRedis_Decode_nilIsAMiss: nothing stored is a miss, not corrupt data.
func TestRedis_Decode_nilIsAMiss(t *testing.T) {
	r := newStore[string](t, RedisOptions{})
	if e, f := r.Decode("k", nil); f != Miss || e.Value != "" {
		t.Fatalf("Decode(nil) = %+v, %v; want a miss", e, f)
	}
	if n := r.Corrupted(); n != 0 {
		t.Fatalf("Corrupted() = %d after Decode(nil), want 0", n)
	}
}
