package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// big is a fence far above the database clock in microseconds, so that
// the fences the statements hand out after it are known exactly.
const big = int64(1) << 60

// formCase is one key's state before a many-key statement or its
// single-key form, and the answer wanted.
type formCase struct {
	name  string
	setup []string // SQL over {lock}, {value}, {beat}, with $1 the namespace and $2 the key
	// acquire: how, and fence (-1: from the clock, at least the statement's start)
	how   int
	fence int64
	// save: its arguments and answer
	token      string
	saveFence  int64
	ttlUS      int64
	release    bool
	n          int
	stored     bool // the save's value is the key's after it
	releasedTo bool // the key's lock is free after it
}

const (
	lockRow  = "INSERT INTO {lock} VALUES ($1, $2, %s, %d, clock_timestamp() + interval '%s', clock_timestamp() + interval '%s', interval '1 second')"
	valueRow = "INSERT INTO {value} VALUES ($1, $2, %d, '\\x01', clock_timestamp() + interval '%s')"
	beatRow  = "INSERT INTO {beat} VALUES ($1, $2, '%s', clock_timestamp() + interval '%s', clock_timestamp() + interval '%s')"
)

func lockSQL(token string, fence int64, expires, beat string) string {
	tok := "NULL"
	if token != "" {
		tok = "'" + token + "'"
	}
	return fmt.Sprintf(lockRow, tok, fence, expires, beat)
}

var acquireCases = []formCase{
	{name: "free, no row", how: 1, fence: -1},
	{name: "free, fences above the clock", setup: []string{lockSQL("", big, "0 s", "0 s"), fmt.Sprintf(valueRow, big+5, "1 hour")},
		how: 1, fence: big + 6},
	{name: "lease ended", setup: []string{lockSQL("old", big, "-1 s", "-1 s")}, how: 1, fence: big + 1},
	{name: "holder missed two beats", setup: []string{lockSQL("old", big, "1 minute", "-10 s")}, how: 2, fence: big + 1},
	{name: "live holder", setup: []string{lockSQL("old", big, "1 minute", "0 s")}, how: 0},
	{name: "live holder by its beat row", setup: []string{lockSQL("old", big, "-1 s", "-10 s"),
		fmt.Sprintf(beatRow, "old", "1 minute", "0 s")}, how: 0},
	{name: "beat row of another token", setup: []string{lockSQL("old", big, "-1 s", "-10 s"),
		fmt.Sprintf(beatRow, "other", "1 minute", "0 s")}, how: 1, fence: big + 1},
}

var saveCases = []formCase{
	{name: "holder stores and releases", setup: []string{lockSQL("tok", 7, "1 minute", "0 s")},
		token: "tok", saveFence: 7, ttlUS: 60e6, release: true, n: 1, stored: true, releasedTo: true},
	{name: "holder stores, keeps the lock", setup: []string{lockSQL("tok", 7, "1 minute", "0 s")},
		token: "tok", saveFence: 7, ttlUS: 60e6, n: 1, stored: true},
	{name: "token lost", setup: []string{lockSQL("other", 7, "1 minute", "0 s")},
		token: "tok", saveFence: 7, ttlUS: 60e6, release: true, n: -1},
	{name: "lease over", setup: []string{lockSQL("tok", 7, "-1 s", "-1 s")},
		token: "tok", saveFence: 7, ttlUS: 60e6, release: true, n: -1},
	{name: "lease kept by its beat row", setup: []string{lockSQL("tok", 7, "-1 s", "-1 s"), fmt.Sprintf(beatRow, "tok", "1 minute", "0 s")},
		token: "tok", saveFence: 7, ttlUS: 60e6, release: true, n: 1, stored: true, releasedTo: true},
	{name: "fence refused, released all the same", setup: []string{lockSQL("tok", 7, "1 minute", "0 s"), fmt.Sprintf(valueRow, 9, "1 hour")},
		token: "tok", saveFence: 7, ttlUS: 60e6, release: true, n: 0, releasedTo: true},
	{name: "larger fence of an ended value", setup: []string{lockSQL("tok", 7, "1 minute", "0 s"), fmt.Sprintf(valueRow, 9, "-1 s")},
		token: "tok", saveFence: 7, ttlUS: 60e6, release: true, n: 1, stored: true, releasedTo: true},
	{name: "no lock", saveFence: 3, ttlUS: 60e6, n: 1, stored: true},
	{name: "no lock, fence refused", setup: []string{fmt.Sprintf(valueRow, 9, "1 hour")}, saveFence: 3, ttlUS: 60e6, n: 0},
	{name: "release only", setup: []string{lockSQL("tok", 7, "1 minute", "0 s")},
		token: "tok", saveFence: 7, release: true, n: 0, releasedTo: true},
}

// TestManyKeyForms_answerAsSingleKeyForms: acquire_many and save_many, one
// statement over keys in every case (and a key asked twice), answer each
// key as acquire and save do called key by key, and as the rules say:
// the fence (the largest of the clock and the stored fences + 1), the
// take-over of a holder past its lease or two missed beats, a live
// holder's key answered without locking its row, the token check, the
// fence rule on save, the release and its notification.
func TestManyKeyForms_answerAsSingleKeyForms(t *testing.T) {
	f := newFixture(t, Options{})
	b := f.backend()
	ctx := testCtx(t)
	if err := b.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	name := func(s string) string { return pgx.Identifier{b.o.Schema, b.o.Prefix + s}.Sanitize() }
	tables := strings.NewReplacer("{lock}", name("lock"), "{value}", name("value"), "{beat}", name("beat"))
	setup := func(t *testing.T, ns string, cases []formCase) {
		t.Helper()
		for i, c := range cases {
			for _, q := range c.setup {
				if _, err := b.pool.Exec(ctx, tables.Replace(q), ns, fmt.Sprint(i)); err != nil {
					t.Fatalf("%s: %s: %v", c.name, q, err)
				}
			}
		}
	}
	var clock int64
	if err := b.pool.QueryRow(ctx, "SELECT "+name("clock_us")+"(clock_timestamp())").Scan(&clock); err != nil {
		t.Fatal(err)
	}

	t.Run("acquire", func(t *testing.T) {
		type answer struct {
			fence int64
			how   int
		}
		cases := append(slices.Clone(acquireCases), formCase{name: "asked twice (first)", how: 1, fence: -1})
		dup := len(cases) - 1
		check := func(form string, got []answer) {
			t.Helper()
			for i, c := range cases {
				g := got[i]
				ok := g.how == c.how && (c.fence == -1 && g.fence >= clock || c.fence != -1 && g.fence == c.fence || c.how == 0 && g.fence == 0)
				if !ok {
					t.Errorf("%s, %s: fence %d, how %d; want how %d, fence %d (-1: from the clock)", form, c.name, g.fence, g.how, c.how, c.fence)
				}
			}
			if g := got[len(cases)]; g != (answer{}) {
				t.Errorf("%s, the second ask of a key: %+v; want (0, 0)", form, g)
			}
		}
		lease, beat := time.Minute.Microseconds(), time.Second.Microseconds()
		// The many-key form: one statement, in a transaction kept open
		// while another connection looks at the rows it locked.
		setup(t, "many", cases)
		n := len(cases) + 1
		ns, keys, tokens, leases, beats := make([]string, n), make([]string, n), make([]string, n), make([]int64, n), make([]int64, n)
		for i := range n {
			ns[i], keys[i], tokens[i], leases[i], beats[i] = "many", fmt.Sprint(min(i, dup)), fmt.Sprintf("new%d", i), lease, beat
		}
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		rows, err := tx.Query(ctx, b.q.acquireMany, ns, keys, tokens, leases, beats)
		if err != nil {
			t.Fatal(err)
		}
		many := make([]answer, n)
		for rows.Next() {
			var i int
			var a answer
			if err := rows.Scan(&i, &a.fence, &a.how); err != nil {
				t.Fatal(err)
			}
			many[i-1] = a
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		check("acquire_many", many)
		for i, c := range cases {
			var locked bool
			err := b.pool.QueryRow(ctx, "SELECT NOT EXISTS (SELECT 1 FROM "+name("lock")+
				" AS l WHERE l.namespace = 'many' AND l.key = $1 FOR UPDATE SKIP LOCKED)", fmt.Sprint(i)).Scan(&locked)
			if err != nil {
				t.Fatal(err)
			}
			if want := c.how != 0; locked != want {
				t.Errorf("acquire_many, %s: row locked %v while its statement's transaction is open; want %v", c.name, locked, want)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}

		// The single-key form, key by key.
		setup(t, "one", cases)
		one := make([]answer, n)
		for i := range n {
			err := b.pool.QueryRow(ctx, "SELECT o_fence, o_how FROM "+name("acquire")+"($1, $2, $3, $4, $5)",
				"one", keys[i], tokens[i], leases[i], beats[i]).Scan(&one[i].fence, &one[i].how)
			if err != nil {
				t.Fatal(err)
			}
		}
		check("acquire", one)
		for i, c := range cases {
			if c.fence != -1 && many[i] != one[i] {
				t.Errorf("%s: acquire_many %+v, acquire %+v", c.name, many[i], one[i])
			}
		}
		// The grants are the rows' holders; the refused keep theirs.
		for _, form := range []string{"many", "one"} {
			for i, c := range cases {
				var token string
				var fence int64
				err := b.pool.QueryRow(ctx, "SELECT token, fence FROM "+name("lock")+" WHERE namespace = $1 AND key = $2",
					form, fmt.Sprint(i)).Scan(&token, &fence)
				if err != nil {
					t.Fatal(err)
				}
				want := "old"
				if c.how != 0 {
					want = tokens[i]
				}
				if token != want {
					t.Errorf("%s, %s: holder %q; want %q", form, c.name, token, want)
				}
			}
		}
	})

	t.Run("save", func(t *testing.T) {
		cases := append(slices.Clone(saveCases),
			formCase{name: "saved twice, first", saveFence: 5, ttlUS: 60e6, n: 1},
			formCase{name: "saved twice, second of a larger fence", saveFence: 6, ttlUS: 60e6, n: 1, stored: true})
		n := len(cases)
		dup := n - 2
		args := func(form string) [][]any {
			out := make([][]any, n)
			for i, c := range cases {
				out[i] = []any{form, fmt.Sprint(min(i, dup)), c.saveFence, []byte(fmt.Sprintf("v%d", i)), c.ttlUS, c.token, c.release,
					"hg_forms_" + form, fmt.Sprint(i)}
			}
			return out
		}
		run := func(form string, send func([][]any) []int) {
			t.Helper()
			setup(t, form, cases[:dup+1])
			l, err := b.pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release()
			if _, err := l.Exec(ctx, "LISTEN hg_forms_"+form); err != nil {
				t.Fatal(err)
			}
			got := send(args(form))
			notified := map[string]bool{}
			for {
				wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				nt, err := l.Conn().WaitForNotification(wctx)
				cancel()
				if err != nil {
					break
				}
				notified[nt.Payload] = true
			}
			for i, c := range cases {
				if got[i] != c.n {
					t.Errorf("%s, %s: %d; want %d", form, c.name, got[i], c.n)
				}
				if i == dup {
					continue // checked by the second save of its key
				}
				var data []byte
				var token *string
				key := fmt.Sprint(min(i, dup))
				err := b.pool.QueryRow(ctx, "SELECT (SELECT data FROM "+name("value")+" WHERE namespace = $1 AND key = $2), "+
					"(SELECT token FROM "+name("lock")+" WHERE namespace = $1 AND key = $2)", form, key).Scan(&data, &token)
				if err != nil {
					t.Fatal(err)
				}
				want := fmt.Sprintf("v%d", i)
				if stored := string(data) == want; stored != c.stored {
					t.Errorf("%s, %s: value %q after it; want %q stored: %v", form, c.name, data, want, c.stored)
				}
				if free := token == nil; c.token != "" && free != c.releasedTo {
					t.Errorf("%s, %s: lock free %v after it; want %v", form, c.name, free, c.releasedTo)
				}
				if notified[fmt.Sprint(i)] != c.releasedTo {
					t.Errorf("%s, %s: notified %v; want %v", form, c.name, notified[fmt.Sprint(i)], c.releasedTo)
				}
			}
		}
		run("smany", func(a [][]any) []int {
			cols := make([][]any, 9)
			for _, row := range a {
				for j, v := range row {
					cols[j] = append(cols[j], v)
				}
			}
			var ns, keys, tokens, channels, payloads []string
			var fences, ttls []int64
			var data [][]byte
			var release []bool
			for i := range a {
				ns, keys = append(ns, cols[0][i].(string)), append(keys, cols[1][i].(string))
				fences, data, ttls = append(fences, cols[2][i].(int64)), append(data, cols[3][i].([]byte)), append(ttls, cols[4][i].(int64))
				tokens, release = append(tokens, cols[5][i].(string)), append(release, cols[6][i].(bool))
				channels, payloads = append(channels, cols[7][i].(string)), append(payloads, cols[8][i].(string))
			}
			rows, err := b.pool.Query(ctx, b.q.saveMany, ns, keys, fences, data, ttls, tokens, release, channels, payloads)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]int, len(a))
			for rows.Next() {
				var i, r int
				if err := rows.Scan(&i, &r); err != nil {
					t.Fatal(err)
				}
				got[i-1] = r
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return got
		})
		run("sone", func(a [][]any) []int {
			got := make([]int, len(a))
			for i, row := range a {
				if err := b.pool.QueryRow(ctx, "SELECT "+name("save")+"($1, $2, $3, $4, $5, $6, $7, $8, $9)", row...).Scan(&got[i]); err != nil {
					t.Fatal(err)
				}
			}
			return got
		})
	})
}

// TestAcquireMany_holderGrantedWhileWaiting: a key that was free when the
// statement of acquires looked, and that another process's grant holds
// by the time the statement has its row lock, is answered as held: the
// holder is looked for again under the row lock.
func TestAcquireMany_holderGrantedWhileWaiting(t *testing.T) {
	f := newFixture(t, Options{})
	b := f.backend()
	ctx := testCtx(t)
	if err := b.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	lockT := b.q.lockT
	if _, err := b.pool.Exec(ctx, "INSERT INTO "+lockT+" VALUES ('ns', 'k', NULL, 1, clock_timestamp(), clock_timestamp(), interval '0')"); err != nil {
		t.Fatal(err)
	}
	// The other grant, its row locked until it commits.
	grant, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = grant.Rollback(ctx) }()
	if _, err := grant.Exec(ctx, "UPDATE "+lockT+" SET token = 'holder', fence = 2, expires_at = clock_timestamp() + interval '1 minute', "+
		"beat_at = clock_timestamp(), beat_every = interval '1 second' WHERE namespace = 'ns' AND key = 'k'"); err != nil {
		t.Fatal(err)
	}
	c, err := b.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	var pid int
	if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		fence int64
		how   int
		err   error
	}
	done := make(chan answer, 1)
	go func() {
		var a answer
		var i int
		a.err = c.QueryRow(ctx, b.q.acquireMany, []string{"ns"}, []string{"k"}, []string{"new"},
			[]int64{time.Minute.Microseconds()}, []int64{time.Second.Microseconds()}).Scan(&i, &a.fence, &a.how)
		done <- a
	}()
	eventually(t, "the statement of acquires waits for the row", func() bool {
		var waiting bool
		err := b.pool.QueryRow(ctx, "SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&waiting)
		return err == nil && waiting
	})
	if err := grant.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || a.how != 0 || a.fence != 0 {
		t.Fatalf("acquire of a key granted while its statement waited: fence %d, how %d, %v; want (0, 0): held", a.fence, a.how, a.err)
	}
	var token string
	if err := b.pool.QueryRow(ctx, "SELECT token FROM "+lockT+" WHERE namespace = 'ns' AND key = 'k'").Scan(&token); err != nil || token != "holder" {
		t.Fatalf("the key's holder after it: %q, %v; want the other grant's", token, err)
	}
}
