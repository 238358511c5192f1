package postgres

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder records what a watcher hears.
type recorder struct {
	mu     sync.Mutex // guards writes, resets
	writes []string
	resets int
}

func (r *recorder) onWrite(key, origin string) {
	r.mu.Lock()
	r.writes = append(r.writes, origin+"/"+key)
	r.mu.Unlock()
}

func (r *recorder) onReset() {
	r.mu.Lock()
	r.resets++
	r.mu.Unlock()
}

func (r *recorder) state() ([]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.writes...), r.resets
}

// eventually waits up to 10 seconds for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestNotify_wakesSubscribersInEveryProcess(t *testing.T) {
	f := newFixture(t, Options{})
	a, b, other := f.open("ns", 0), f.open("ns", 0), f.open("other", 0)
	ctx := testCtx(t)
	waitListening(t, a, b, other)
	wa, ua := a.Subscribe("k")
	wb, ub := b.Subscribe("k")
	wj, uj := b.Subscribe("j")
	wo, uo := other.Subscribe("k")
	defer func() { ua(); ub(); uj(); uo() }()

	if err := a.Notify(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	for i, c := range []<-chan struct{}{wa, wb} {
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Fatalf("subscriber %d not woken", i)
		}
	}
	time.Sleep(50 * time.Millisecond)
	select {
	case <-wj:
		t.Fatal("another key's subscriber woken")
	case <-wo:
		t.Fatal("another namespace's subscriber woken")
	default:
	}
	// Ended subscriptions hear nothing, and cost nothing.
	ub()
	if err := a.Notify(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	<-wa
	select {
	case <-wb:
		t.Fatal("an ended subscription was woken")
	case <-time.After(50 * time.Millisecond):
	}
}

func TestAnnounce_reachesWatchersOfEveryProcess(t *testing.T) {
	f := newFixture(t, Options{})
	a, b := f.open("ns", 0), f.open("ns", 0)
	ctx := testCtx(t)
	var ra, rb recorder
	stopA := a.Watch(ra.onWrite, ra.onReset)
	defer stopA()
	stopB := b.Watch(rb.onWrite, rb.onReset)
	waitListening(t, a, b)
	// The resets of the connections coming up are behind us.
	time.Sleep(20 * time.Millisecond)
	_, resetsB := rb.state()

	if err := a.Announce(ctx, "k:1", "pod:a"); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*recorder{&ra, &rb} {
		eventually(t, "announcement heard", func() bool {
			w, _ := r.state()
			return len(w) == 1 && w[0] == "pod:a/k:1"
		})
	}
	// A key too long for a payload: the watchers drop everything.
	if err := a.Announce(ctx, strings.Repeat("k", 9000), "pod:a"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "long key's announcement heard as a reset", func() bool {
		_, n := rb.state()
		return n == resetsB+1
	})
	stopB()
	if err := a.Announce(ctx, "k:2", "pod:a"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "second announcement heard", func() bool { w, _ := ra.state(); return len(w) == 2 })
	if w, _ := rb.state(); len(w) != 1 {
		t.Fatalf("a stopped watcher heard %v", w)
	}
}

func TestAnnouncePayload_fitsAndParses(t *testing.T) {
	l := &listener{subs: map[string]map[*sub]struct{}{}, watchers: map[*watcher]struct{}{}}
	var r recorder
	l.watch(r.onWrite, r.onReset)
	for _, c := range []struct{ key, origin string }{
		{"k", "o"}, {"k:with:colons", "origin:9:x"}, {"", ""}, {"12:ab", "3"},
	} {
		l.dispatch(announcePayload(c.key, c.origin))
	}
	w, _ := r.state()
	want := []string{"o/k", "origin:9:x/k:with:colons", "/", "3/12:ab"}
	if strings.Join(w, "|") != strings.Join(want, "|") {
		t.Fatalf("heard %q, want %q", w, want)
	}
	if p := announcePayload(strings.Repeat("k", 8000), "o"); p != "r" {
		t.Fatalf("payload of a long key = %.20q, want a reset", p)
	}
	if p := announcePayload("bad\xff", "o"); p != "r" {
		t.Fatalf("payload of a key that is not text = %q, want a reset", p)
	}
	if p := wakePayload(rowKey(strings.Repeat("k", 20000))); len(p) > 600 {
		t.Fatalf("wake payload of a long key is %d bytes", len(p))
	}
}

func TestRelease_wakesWaitersInEveryProcess(t *testing.T) {
	f := newFixture(t, Options{})
	a, b := f.open("ns", 0), f.open("ns", 0)
	ctx := testCtx(t)
	waitListening(t, a, b)
	l, err := a.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	wake, unsub := b.Subscribe("k")
	defer unsub()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("a waiter in another process was not woken by the release")
	}
}

func TestListenDSN_separateConnection(t *testing.T) {
	s := server(t)
	ctx := testCtx(t)
	// A LISTEN connection that cannot be had: waiters are woken every
	// Poll instead, and the rest works through the pool.
	bad := newFixture(t, Options{ListenDSN: "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=1",
		Poll: 20 * time.Millisecond})
	v := bad.open("ns", 0)
	wake, unsub := v.Subscribe("k")
	defer unsub()
	select {
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("waiters not woken by the poll while LISTEN cannot connect")
	}
	if err := v.Notify(ctx, "k"); err != nil {
		t.Fatalf("Notify through the pool: %v", err)
	}
	if v.l.listening() {
		t.Fatal("listening through an unreachable ListenDSN")
	}
	// A good one is used.
	good := newFixture(t, Options{ListenDSN: s.DSN()})
	w := good.open("ns", 0)
	waitListening(t, w)
	if _, err := New(newPool(t), Options{ListenDSN: "::not a dsn"}); err == nil {
		t.Fatal("New with a ListenDSN that does not parse: no error")
	}
}

func TestOpen_returnsListening(t *testing.T) {
	f := newFixture(t, Options{})
	a := f.open("ns", 0)
	ctx := testCtx(t)
	var r recorder
	b := f.open("ns", 0)
	if !b.l.listening() {
		t.Fatal("Open returned before its LISTEN connection was up")
	}
	stop := b.Watch(r.onWrite, r.onReset)
	defer stop()
	wake, unsub := b.Subscribe("k")
	defer unsub()
	if err := a.Notify(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("a Notify right after Open was lost")
	}
	if _, n := r.state(); n != 0 {
		t.Fatalf("%d resets of a view that listened from its start", n)
	}
	// A LISTEN connection that cannot be had does not fail Open.
	down := newFixture(t, Options{ListenDSN: "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable"})
	start := time.Now()
	v := down.open("ns", 0)
	if v.l.listening() || time.Since(start) > 5*time.Second {
		t.Fatalf("Open with LISTEN unreachable: listening %v after %v", v.l.listening(), time.Since(start))
	}
}
