package rlock

import (
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/internal/rscript"
)

// acquireCases are the states a key's lock and value can be in, each set
// up by its function for the key (whose fence counter is set high, so
// that the fence granted does not depend on the server's clock).
var acquireCases = []struct {
	name  string
	setup func(t *testing.T, l *Redis, key string)
}{
	{"free", func(*testing.T, *Redis, string) {}},
	{"free, stale value", func(t *testing.T, l *Redis, key string) {
		must(t, rdb.HSet(testCtx(t), l.keys.Value(key), rkey.FieldData, "old", rkey.FieldExpires, "1", rkey.FieldFence, "7").Err())
	}},
	{"taken over", func(t *testing.T, l *Redis, key string) {
		must(t, rdb.HSet(testCtx(t), l.keys.Lock(key), "t", "other", "f", "5", "h", "1000", "s", "2000").Err())
		must(t, rdb.PExpire(testCtx(t), l.keys.Lock(key), time.Minute).Err())
	}},
	{"foreign", func(t *testing.T, l *Redis, key string) {
		must(t, rdb.Set(testCtx(t), l.keys.Lock(key), "x", 0).Err())
	}},
	{"foreign hash without expiry", func(t *testing.T, l *Redis, key string) {
		must(t, rdb.HSet(testCtx(t), l.keys.Lock(key), "t", "other", "f", "5", "h", "1000", "s", "2000").Err())
	}},
	{"live holder", func(t *testing.T, l *Redis, key string) {
		// A beat in the future: age 0 whenever the script runs.
		beat := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
		must(t, rdb.HSet(testCtx(t), l.keys.Lock(key), "t", "other", "f", "5", "h", beat, "s", "60000").Err())
		must(t, rdb.PExpire(testCtx(t), l.keys.Lock(key), time.Minute).Err())
	}},
	{"fresh value", func(t *testing.T, l *Redis, key string) {
		exp := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
		must(t, rdb.HSet(testCtx(t), l.keys.Value(key), rkey.FieldData, "bytes", rkey.FieldExpires, exp, rkey.FieldFence, "7").Err())
	}},
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// lockState is what a script left at a key: the lock's fields (its token
// as "mine" when it is the caller's, "tok-" and the key), whether it has
// an expiry, the counter.
func lockState(t *testing.T, l *Redis, key string) string {
	t.Helper()
	ctx := testCtx(t)
	kind := rdb.Type(ctx, l.keys.Lock(key)).Val()
	var fields string
	if kind == "hash" {
		m := rdb.HGetAll(ctx, l.keys.Lock(key)).Val()
		tok := m["t"]
		if tok == "tok-"+key {
			tok = "mine"
		}
		fields = fmt.Sprintf("t=%s f=%s s=%s", tok, m["f"], m["s"])
	}
	ttl := rdb.PTTL(ctx, l.keys.Lock(key)).Val() > 0
	return fmt.Sprintf("%s %s expiry=%v counter=%s", kind, fields, ttl, rdb.Get(ctx, l.keys.Fence(key)).Val())
}

// The batch form of the acquire script answers each key as the single-key
// form does, and leaves the same lock behind, in every case, with the
// value read and without: the cases run in one batch script.
func TestAcquireManyScript_repliesAsSingleKey(t *testing.T) {
	l := newLocker(t, rdb)
	ctx := testCtx(t)
	const counter = "4503599627370496" // 2^52: above the server's clock in µs
	lease, keep, dead := rkey.Millis(time.Minute), rkey.Millis(time.Hour), rkey.Millis(2*time.Second)
	for _, read := range []bool{false, true} {
		now := int64(0)
		if read {
			now = time.Now().UnixMilli()
		}
		batch := []any{0} // numkeys, then keys and arguments
		var toks []any
		var singles []any
		for _, c := range acquireCases {
			one, many := fmt.Sprintf("one %s %v", c.name, read), fmt.Sprintf("many %s %v", c.name, read)
			for _, k := range []string{one, many} {
				c.setup(t, l, k)
				must(t, rdb.Set(ctx, l.keys.Fence(k), counter, 0).Err())
			}
			reply, err := rscript.Run(ctx, rdb, acquireScript,
				[]string{l.keys.Lock(one), l.keys.Fence(one), l.keys.Value(one)},
				"tok-"+one, lease, keep, rkey.FieldFence, dead, now, rkey.FieldData, rkey.FieldExpires).Result()
			if err != nil {
				t.Fatalf("%s: %v", one, err)
			}
			singles = append(singles, reply)
			batch = append(batch, l.keys.Lock(many), l.keys.Fence(many), l.keys.Value(many))
			toks = append(toks, "tok-"+many)
		}
		batch[0] = len(acquireCases) * 3
		batch = append(batch, lease, keep, rkey.FieldFence, dead, now, rkey.FieldData, rkey.FieldExpires)
		batch = append(batch, toks...)
		cmds, err := rscript.RunMany(ctx, rdb, acquireManyScript, [][]any{batch})
		if err != nil {
			t.Fatal(err)
		}
		got, err := cmds[0].(*redis.Cmd).Slice()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(acquireCases) {
			t.Fatalf("value read %v: %d replies, want %d", read, len(got), len(acquireCases))
		}
		for i, c := range acquireCases {
			if !reflect.DeepEqual(got[i], singles[i]) {
				t.Errorf("%s (value read %v): batch replied %v, single key %v", c.name, read, got[i], singles[i])
			}
			one, many := fmt.Sprintf("one %s %v", c.name, read), fmt.Sprintf("many %s %v", c.name, read)
			if a, b := lockState(t, l, one), lockState(t, l, many); a != b {
				t.Errorf("%s (value read %v): batch left %q, single key %q", c.name, read, b, a)
			}
		}
	}
}

// The batch forms of the release and extend scripts answer each lock as
// the single-key forms do: held by the token, held by another, gone.
func TestReleaseAndExtendManyScripts_replyAsSingleKey(t *testing.T) {
	l := newLocker(t, rdb)
	ctx := testCtx(t)
	setup := func(key, holder string) {
		if holder == "" {
			return
		}
		must(t, rdb.HSet(ctx, l.keys.Lock(key), "t", holder, "f", "5", "h", "1000", "s", "2000").Err())
		must(t, rdb.PExpire(ctx, l.keys.Lock(key), time.Minute).Err())
	}
	holders := []string{"tok", "other", ""}
	for _, op := range []string{"extend", "release"} {
		var singles []any
		var batch []any
		var keys, argv []any
		for _, h := range holders {
			one, many := op+" one "+h, op+" many "+h
			setup(one, h)
			setup(many, h)
			var cmd *redis.Cmd
			if op == "extend" {
				cmd = rscript.Run(ctx, rdb, extendScript, []string{l.keys.Lock(one), l.keys.Fence(one)}, "tok", 60000, 3600000)
				keys = append(keys, l.keys.Lock(many), l.keys.Fence(many))
				argv = append(argv, "tok", 60000, 3600000)
			} else {
				cmd = rscript.Run(ctx, rdb, releaseScript, []string{l.keys.Lock(one)}, "tok", "", "")
				keys = append(keys, l.keys.Lock(many))
				argv = append(argv, "tok", "")
			}
			v, err := cmd.Result()
			if err != nil {
				t.Fatalf("%s: %v", one, err)
			}
			singles = append(singles, v)
		}
		script := extendManyScript
		if op == "release" {
			script = releaseManyScript
			argv = append([]any{""}, argv...)
		}
		batch = append(append(append(batch, len(keys)), keys...), argv...)
		cmds, err := rscript.RunMany(ctx, rdb, script, [][]any{batch})
		if err != nil {
			t.Fatal(err)
		}
		got, err := cmds[0].(*redis.Cmd).Slice()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, singles) {
			t.Errorf("%s: batch replied %v, single key %v", op, got, singles)
		}
		for _, h := range holders {
			if a, b := lockState(t, l, op+" one "+h), lockState(t, l, op+" many "+h); a != b {
				t.Errorf("%s held by %q: batch left %q, single key %q", op, h, b, a)
			}
		}
	}
}
