package rcache

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/internal/rscript"
)

// The batch form of the write script answers each write as the
// single-key form does, and leaves the same value, lock and announcement
// behind: a write without a lock, fenced writes over older and newer
// values, over foreign data, with the lock held (released and announced)
// or lost. The cases run in one batch script.
func TestSetManyScript_repliesAsSingleKey(t *testing.T) {
	r := newStore[string](t, RedisOptions{})
	ctx := testCtx(t)
	type write struct {
		fence   int64
		token   string
		release bool
	}
	cases := []struct {
		name  string
		setup func(key string)
		w     write
	}{
		{"no lock, empty", func(string) {}, write{0, "", false}},
		{"no lock over a fenced value", func(k string) {
			must(t, rdb.HSet(ctx, r.keys.Value(k), rkey.FieldFence, "9", rkey.FieldData, "x").Err())
		}, write{0, "", false}},
		{"older fence", func(k string) {
			must(t, rdb.HSet(ctx, r.keys.Value(k), rkey.FieldFence, "9", rkey.FieldData, "x").Err())
		}, write{5, "", false}},
		{"newer fence", func(k string) {
			must(t, rdb.HSet(ctx, r.keys.Value(k), rkey.FieldFence, "3", rkey.FieldData, "x").Err())
		}, write{5, "", false}},
		{"foreign value", func(k string) { must(t, rdb.Set(ctx, r.keys.Value(k), "junk", 0).Err()) }, write{5, "", false}},
		{"foreign fence", func(k string) {
			must(t, rdb.HSet(ctx, r.keys.Value(k), rkey.FieldFence, "1.5", rkey.FieldData, "x").Err())
		}, write{5, "", false}},
		{"held, released", func(k string) {
			must(t, rdb.HSet(ctx, r.keys.Lock(k), "t", "tok", "f", "5").Err())
		}, write{5, "tok", true}},
		{"held, refused, released", func(k string) {
			must(t, rdb.HSet(ctx, r.keys.Lock(k), "t", "tok", "f", "5").Err())
			must(t, rdb.HSet(ctx, r.keys.Value(k), rkey.FieldFence, "9", rkey.FieldData, "x").Err())
		}, write{5, "tok", true}},
		{"held, kept", func(k string) {
			must(t, rdb.HSet(ctx, r.keys.Lock(k), "t", "tok", "f", "5").Err())
		}, write{5, "tok", false}},
		{"lock lost", func(k string) {
			must(t, rdb.HSet(ctx, r.keys.Lock(k), "t", "other", "f", "6").Err())
		}, write{5, "tok", true}},
	}
	sub := rdb.Subscribe(ctx, r.keys.Channel())
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	var singles []any
	var writes []Write[string]
	for _, c := range cases {
		one, many := "one "+c.name, "many "+c.name
		c.setup(one)
		c.setup(many)
		args, err := r.setArgs(one, entry("v", c.w.fence), c.w.token, c.w.release)
		if err != nil {
			t.Fatal(err)
		}
		n, err := rscript.Run(ctx, rdb, setScript, []string{args[1].(string), args[2].(string)}, args[3:]...).Result()
		if err != nil {
			t.Fatalf("%s: %v", one, err)
		}
		singles = append(singles, n)
		writes = append(writes, Write[string]{Key: many, Entry: entry("v", c.w.fence), Token: c.w.token, Release: c.w.release})
	}
	// SetMany's own outcomes follow from the replies; the replies are
	// compared here, from the batch script SetMany sends.
	var many []any
	many = append(many, 2*len(writes))
	var ws []any
	for _, w := range writes {
		a, err := r.setArgs(w.Key, w.Entry, w.Token, w.Release)
		if err != nil {
			t.Fatal(err)
		}
		many = append(many, a[1], a[2])
		ws = append(ws, a[3], a[4], a[5], a[8], a[10], a[11], a[12])
	}
	many = append(append(many, rkey.FieldFence, rkey.FieldData, rkey.FieldExpires), ws...)
	cmds, err := rscript.RunMany(ctx, rdb, setManyScript, [][]any{many})
	if err != nil {
		t.Fatal(err)
	}
	got, err := cmds[0].(*redis.Cmd).Slice()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, singles) {
		t.Errorf("batch replied %v, single key %v", got, singles)
	}
	state := func(k string) string {
		v := rdb.HGetAll(ctx, r.keys.Value(k)).Val()
		return fmt.Sprintf("value f=%s d?=%v lock %s", v[rkey.FieldFence], v[rkey.FieldData] != "", rdb.Type(ctx, r.keys.Lock(k)).Val())
	}
	announced := map[string]bool{}
	timeout := time.After(5 * time.Second)
	for _, c := range cases {
		if a, b := state("one "+c.name), state("many "+c.name); a != b {
			t.Errorf("%s: batch left %q, single key %q", c.name, b, a)
		}
		if c.w.release && c.w.token == "tok" && c.name != "lock lost" {
			for !announced["one "+c.name] || !announced["many "+c.name] {
				select {
				case m := <-sub.Channel():
					announced[m.Payload] = true
				case <-timeout:
					t.Fatalf("%s: announcements heard %v", c.name, announced)
				}
			}
		}
	}
	for k := range announced {
		if k == "one lock lost" || k == "many lock lost" {
			t.Errorf("%q announced by a writer that lost its lock", k)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
