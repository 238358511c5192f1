package flight

import (
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var errBoom = errors.New("boom")

// TestJoin_oneLeaderPerKey: the first caller of a key leads its flight,
// the next join it and hear its result once it ends; the key is then
// free for a new flight. Another key has a flight of its own.
func TestJoin_oneLeaderPerKey(t *testing.T) {
	var g Group[int]
	f, joined := g.Join("k")
	if joined {
		t.Fatal("the first caller of k joined a flight; want it to lead")
	}
	if other, joined := g.Join("other"); joined || other == f {
		t.Fatal("another key joined k's flight")
	}
	j, joined := g.Join("k")
	if !joined || j != f {
		t.Fatalf("the second caller of k: joined %v, same flight %v; want k's flight", joined, j == f)
	}
	if j.Done() == nil {
		t.Fatal("a joiner got no channel to wait on")
	}
	*f.Outcome() = 7
	g.End("k", f, f.Outcome(), errBoom)
	select {
	case <-j.Done():
	default:
		t.Fatal("the joiner's channel is still open after End")
	}
	val, err := j.Result()
	if p, _ := val.(*int); p == nil || *p != 7 || err != errBoom {
		t.Fatalf("the joiner heard %v, %v; want the leader's outcome 7, %v", val, err, errBoom)
	}
	if g.Underway("k") != nil {
		t.Fatal("k's flight is still under way after End")
	}
	if _, joined := g.Join("k"); joined {
		t.Fatal("a caller of k after End joined the ended flight; want a new one")
	}
}

// TestUnderway_waitable: Underway finds only a flight under way, and makes
// it waitable; Waited says so.
func TestUnderway_waitable(t *testing.T) {
	var g Group[int]
	if g.Underway("k") != nil || g.Waited("k") {
		t.Fatal("a flight of k under way before anyone led one")
	}
	f, _ := g.Join("k")
	if f.Done() != nil || g.Waited("k") {
		t.Fatal("a leader's flight is waited for before anyone waits")
	}
	u := g.Underway("k")
	if u != f || u.Done() == nil || !g.Waited("k") {
		t.Fatalf("Underway(k) = same flight %v, waitable %v; want k's flight, waitable", u == f, u.Done() != nil)
	}
	if g.Waitable(f) != u.Done() {
		t.Fatal("Waitable made a second channel")
	}
	g.End("k", f, nil, nil)
	<-u.Done()
}

// TestLead_hookHearsTheFlightUnderway: a batch that meets a flight under
// way hears its result through its hook, once, at End; a key with none
// is the batch's to lead.
func TestLead_hookHearsTheFlightUnderway(t *testing.T) {
	var g Group[string]
	f, _ := g.Join("k")
	var heard []any
	if _, mine := g.Lead("k", func(val any, err error) { heard = append(heard, val, err) }); mine {
		t.Fatal("Lead of a key under way led it; want it to join")
	}
	led, mine := g.Lead("free", func(any, error) { t.Error("the hook of a key the batch leads ran") })
	if !mine {
		t.Fatal("Lead of a free key joined; want it to lead")
	}
	g.End("k", f, "v", errBoom)
	if len(heard) != 2 || heard[0] != "v" || heard[1] != errBoom {
		t.Fatalf("the hook heard %v; want v and %v once", heard, errBoom)
	}
	g.End("free", led, "w", nil)
	g.End("k", f, "again", nil) // an ended flight has no hooks left
	if len(heard) != 2 {
		t.Fatalf("the hook heard %v; want it to run once", heard)
	}
}

// TestDo_sharesOneRun: callers of Do for a key while its fn runs share
// that run's result, shared set.
func TestDo_sharesOneRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g Group[int]
		release := make(chan struct{})
		runs := 0
		var wg sync.WaitGroup
		type res struct {
			v      any
			err    error
			shared bool
		}
		out := make([]res, 4)
		for i := range out {
			wg.Go(func() {
				v, err, shared := g.Do("k", func() (any, error) {
					runs++
					<-release
					return "v", errBoom
				})
				out[i] = res{v, err, shared}
			})
		}
		synctest.Wait() // one runs fn, the others wait for it
		close(release)
		wg.Wait()
		sharers := 0
		for i, r := range out {
			if r.v != "v" || r.err != errBoom {
				t.Errorf("caller %d got %v, %v; want v, %v", i, r.v, r.err, errBoom)
			}
			if r.shared {
				sharers++
			}
		}
		if runs != 1 || sharers != len(out)-1 {
			t.Fatalf("%d runs, %d callers shared; want 1 run, %d shared", runs, sharers, len(out)-1)
		}
	})
}

// TestDo_flightThatExits: a flight whose fn exits before it returns, by
// runtime.Goexit or a panic, ends with ErrExited for its joiner, and the
// key is free again; a panic still goes on up the leader's goroutine. A
// fn that returns is the control.
func TestDo_flightThatExits(t *testing.T) {
	tests := []struct {
		name      string
		exit      func() // what fn does once its joiner waits
		returned  bool   // the leader's Do returned
		panicked  any    // what the leader's goroutine recovered
		joinerVal any
		joinerErr error
	}{
		{name: "runtime.Goexit", exit: runtime.Goexit, joinerErr: ErrExited},
		{name: "panic", exit: func() { panic("loader") }, panicked: "loader", joinerErr: ErrExited},
		{name: "returns", exit: func() {}, returned: true, joinerVal: "v", joinerErr: errBoom},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var g Group[int]
				gate := make(chan struct{})
				type leaderEnd struct {
					returned bool
					panicked any
				}
				leader := make(chan leaderEnd, 1)
				go func() {
					var e leaderEnd
					defer func() { e.panicked = recover(); leader <- e }()
					g.Do("k", func() (any, error) {
						<-gate
						tc.exit()
						return "v", errBoom
					})
					e.returned = true
				}()
				synctest.Wait() // the leader runs fn
				type joinerEnd struct {
					v      any
					err    error
					shared bool
				}
				joiner := make(chan joinerEnd, 1)
				go func() {
					v, err, shared := g.Do("k", func() (any, error) { return "second run", nil })
					joiner <- joinerEnd{v, err, shared}
				}()
				synctest.Wait() // the joiner waits for the leader
				if !g.Waited("k") {
					t.Fatal("nobody waits for k's flight; want its joiner to")
				}
				close(gate)
				if e := <-leader; e.returned != tc.returned || e.panicked != tc.panicked {
					t.Errorf("the leader returned %v, recovered %v; want %v, %v", e.returned, e.panicked, tc.returned, tc.panicked)
				}
				if j := <-joiner; j.v != tc.joinerVal || j.err != tc.joinerErr || !j.shared {
					t.Errorf("the joiner got %v, %v, shared %v; want %v, %v, shared", j.v, j.err, j.shared, tc.joinerVal, tc.joinerErr)
				}
				if g.Underway("k") != nil {
					t.Error("k's flight is still under way once its fn exited")
				}
			})
		})
	}
}

// TestLeadMany_leadsTheFreeKeysAndHearsEveryKeyOnce: a batch leads the
// keys with no flight under way and joins the others; each key's result
// reaches hear once, a joined key's when its flight ends, a led key's
// when the batch ends it, after its flight has ended for its own
// joiners. A nil Group leads every key.
func TestLeadMany_leadsTheFreeKeysAndHearsEveryKeyOnce(t *testing.T) {
	tests := []struct {
		name     string
		nilGroup bool
		underway []string // keys with a flight under way before the batch
		keys     []string
		wantLed  []string
	}{
		{name: "none under way", keys: []string{"a", "b"}, wantLed: []string{"a", "b"}},
		{name: "some under way", underway: []string{"b", "x"}, keys: []string{"a", "b", "c"}, wantLed: []string{"a", "c"}},
		{name: "all under way", underway: []string{"a", "b"}, keys: []string{"a", "b"}},
		{name: "nil Group", nilGroup: true, keys: []string{"a", "b"}, wantLed: []string{"a", "b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := new(Group[int])
			if tc.nilGroup {
				g = nil
			}
			flights := map[string]*Call[int]{}
			for _, k := range tc.underway {
				flights[k], _ = g.Join(k)
			}
			type heard struct {
				val    any
				err    error
				joined bool
			}
			got := map[string][]heard{}
			b := g.LeadMany(tc.keys, func(k string, val any, err error, joined bool) {
				if !joined && g != nil && g.Underway(k) != nil {
					t.Errorf("the batch heard %s while its flight was under way", k)
				}
				got[k] = append(got[k], heard{val, err, joined})
			})
			if !slices.Equal(b.Keys(), tc.wantLed) {
				t.Fatalf("the batch leads %v; want %v", b.Keys(), tc.wantLed)
			}
			var joiners []*Call[int] // of the flights the batch leads
			for _, k := range b.Keys() {
				if g != nil {
					joiners = append(joiners, g.Underway(k))
				}
			}
			for k, f := range flights {
				g.End(k, f, "then "+k, errBoom)
			}
			b.End(func(k string) (any, error) { return "led " + k, nil })
			for _, k := range tc.keys {
				want := heard{"then " + k, errBoom, true}
				if slices.Contains(tc.wantLed, k) {
					want = heard{"led " + k, nil, false}
				}
				if len(got[k]) != 1 || got[k][0] != want {
					t.Errorf("the batch heard %s as %+v; want once, as %+v", k, got[k], want)
				}
			}
			for i, j := range joiners {
				if j == nil {
					t.Fatalf("no flight of %s under way while the batch led it", b.Keys()[i])
				}
				select {
				case <-j.Done():
				default:
					t.Fatalf("a joiner of %s still waits after End", b.Keys()[i])
				}
				if val, err := j.Result(); val != "led "+b.Keys()[i] || err != nil {
					t.Errorf("a joiner of %s heard %v, %v; want the batch's result", b.Keys()[i], val, err)
				}
			}
			for _, k := range tc.keys {
				if g != nil && g.Underway(k) != nil {
					t.Errorf("%s's flight is still under way after End", k)
				}
			}
		})
	}
}

// TestDo_nilGroupRunsEachCallAlone: a nil Group shares nothing.
func TestDo_nilGroupRunsEachCallAlone(t *testing.T) {
	var g *Group[int]
	for i := range 2 {
		v, err, shared := g.Do("k", func() (any, error) { return i, errBoom })
		if v != i || err != errBoom || shared {
			t.Fatalf("call %d got %v, %v, shared %v; want its own run's %d, %v", i, v, err, shared, i, errBoom)
		}
	}
}

// TestBatchRun_loadThatExits: a batch's load that exits before it
// returns (runtime.Goexit, or a panic, which goes on up) ends every
// flight the batch leads with ErrExited, for their joiners and for the
// batch's own hear; a load that returns ends each with its result.
func TestBatchRun_loadThatExits(t *testing.T) {
	tests := []struct {
		name     string
		exit     func()
		panicked any
		wantErr  error
	}{
		{name: "runtime.Goexit", exit: runtime.Goexit, wantErr: ErrExited},
		{name: "panic", exit: func() { panic("load") }, panicked: "load", wantErr: ErrExited},
		{name: "returns", exit: func() {}, wantErr: errBoom},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var g Group[int]
				heard := make(chan error, 2)
				b := g.LeadMany([]string{"a", "b"}, func(_ string, _ any, err error, _ bool) { heard <- err })
				joiner := make(chan error, 1)
				go func() {
					_, err, _ := g.Do("a", func() (any, error) { return nil, nil })
					joiner <- err
				}()
				synctest.Wait() // the joiner waits for the batch's flight of a
				recovered := make(chan any, 1)
				go func() {
					defer func() { recovered <- recover() }()
					b.Run(func() func(string) (any, error) {
						tc.exit()
						return func(string) (any, error) { return nil, errBoom }
					})
				}()
				if v := <-recovered; v != tc.panicked {
					t.Errorf("the batch's goroutine recovered %v; want %v", v, tc.panicked)
				}
				for range 2 {
					if err := <-heard; err != tc.wantErr {
						t.Errorf("hear got %v; want %v", err, tc.wantErr)
					}
				}
				if err := <-joiner; err != tc.wantErr {
					t.Errorf("the joiner got %v; want %v", err, tc.wantErr)
				}
				if g.Underway("a") != nil || g.Underway("b") != nil {
					t.Error("a flight of the batch is still under way")
				}
			})
		})
	}
}
