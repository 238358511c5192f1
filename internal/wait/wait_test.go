package wait

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// A loop under test: its looks and its spent call are handed to the test,
// which answers each look with the keys a live holder still holds. It runs
// in a synctest bubble, so its time is the bubble's: a look's at is how
// long after the wait's start it came.

// look is one call of a loop's Look, waiting for the test's answer.
type look struct {
	keys      []string
	announced bool
	at        time.Duration
	held      chan []string
}

// spent is the loop's Spent call.
type spent struct {
	keys []string
	at   time.Duration
}

// loop is a Loop under test: its looks arrive on looks, its Spent on
// spents, and what it returns on done.
type loop struct {
	looks  chan look
	spents chan spent
	done   chan []string
}

// poll is the Poll of the loops under test.
const poll = 100 * time.Millisecond

// start runs Loop over keys on sub, with a MaxWait of maxWait, from now.
// A look left unanswered ends with ctx (the test's, at its end).
func start(ctx context.Context, keys []string, sub Sub, maxWait time.Duration) *loop {
	l := &loop{looks: make(chan look), spents: make(chan spent, 1), done: make(chan []string, 1)}
	begun := time.Now()
	w := Looks{
		Look: func(ctx context.Context, keys []string, announced bool) []string {
			c := look{keys: slices.Clone(keys), announced: announced, at: time.Since(begun), held: make(chan []string)}
			select {
			case l.looks <- c:
			case <-ctx.Done(): // the test ended
				return keys
			}
			select {
			case held := <-c.held:
				return held
			case <-ctx.Done():
				return keys
			}
		},
		Spent: func(_ context.Context, keys []string) {
			l.spents <- spent{keys: slices.Clone(keys), at: time.Since(begun)}
		},
	}
	go func() { l.done <- Loop(ctx, keys, sub, Pace{MaxWait: maxWait, Poll: poll, Start: begun}, w) }()
	return l
}

// next returns the loop's next look; it fails if the loop returned first.
func (l *loop) next(t *testing.T) look {
	t.Helper()
	select {
	case c := <-l.looks:
		return c
	case left := <-l.done:
		t.Fatalf("the loop returned %v; want a look", left)
		return look{}
	}
}

// none fails if the loop looks now, without time passing.
func (l *loop) none(t *testing.T, why string) {
	t.Helper()
	synctest.Wait()
	select {
	case c := <-l.looks:
		t.Fatalf("%s: looked at %v (announced %v) after %v; want no look", why, c.keys, c.announced, c.at)
	default:
	}
}

// TestLoop_announcementLooksAtOnce: an announcement of a key's own
// subscription wakes a look at once, one that says it was announced, and
// none comes before it: the look that found the lock held was the last
// news.
func TestLoop_announcementLooksAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		woken := make(chan struct{}, 1)
		l := start(t.Context(), []string{"k"}, Sub{Woken: woken}, time.Minute)
		l.none(t, "before any announcement")
		woken <- struct{}{}
		c := l.next(t)
		if !slices.Equal(c.keys, []string{"k"}) || !c.announced || c.at != 0 {
			t.Fatalf("looked at %v (announced %v) after %v; want [k], announced, at once", c.keys, c.announced, c.at)
		}
		c.held <- nil
		if left := <-l.done; left != nil {
			t.Errorf("the loop returned %v; want none", left)
		}
	})
}

// TestLoop_announcedBeforeTheLoopLooksAtOnce: an announcement heard
// between the look that found the lock held and the loop's start is
// looked at at once; with LookNow (a notifier without marks) the loop
// looks once at once, as a poll does unless an announcement came.
func TestLoop_announcedBeforeTheLoopLooksAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		woken := make(chan struct{}, 1)
		woken <- struct{}{}
		l := start(t.Context(), []string{"k"}, Sub{Woken: woken}, time.Minute)
		if c := l.next(t); !c.announced || c.at != 0 {
			t.Errorf("announced before: the first look is announced %v, after %v; want announced, at once", c.announced, c.at)
		} else {
			c.held <- nil
		}
		<-l.done

		l = start(t.Context(), []string{"k"}, Sub{Woken: make(chan struct{}, 1), LookNow: true}, time.Minute)
		if c := l.next(t); c.announced || c.at != 0 {
			t.Errorf("LookNow: the first look is announced %v, after %v; want a poll's, at once", c.announced, c.at)
		} else {
			c.held <- nil
		}
		<-l.done

		// With LookNow too, an announcement heard before makes the first
		// look an announced one.
		woken <- struct{}{}
		l = start(t.Context(), []string{"k"}, Sub{Woken: woken, LookNow: true}, time.Minute)
		if c := l.next(t); !c.announced || c.at != 0 {
			t.Errorf("LookNow, announced before: the first look is announced %v, after %v; want announced, at once", c.announced, c.at)
		} else {
			c.held <- nil
		}
		<-l.done
	})
}

// TestLoop_falseAnnouncementQuietsTheKeyUntilThePoll: an announcement
// whose look finds the key still held told nothing: the key's next
// announcements wake no look before the poll tick, which looks at it.
func TestLoop_falseAnnouncementQuietsTheKeyUntilThePoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		woken := make(chan struct{}, 1)
		l := start(t.Context(), []string{"k"}, Sub{Woken: woken}, time.Minute)
		woken <- struct{}{}
		c := l.next(t)
		c.held <- []string{"k"} // a false announcement
		woken <- struct{}{}
		l.none(t, "announced again after a false announcement")
		c = l.next(t)
		if c.announced || c.at == 0 || c.at > poll*3/2 {
			t.Fatalf("looked (announced %v) after %v; want the poll's look, within %v", c.announced, c.at, poll*3/2)
		}
		// The poll heard the quiet key again: an announcement wakes it.
		c.held <- []string{"k"}
		woken <- struct{}{}
		if c2 := l.next(t); !c2.announced || c2.at != c.at {
			t.Fatalf("after the poll: looked (announced %v) after %v; want announced at %v", c2.announced, c2.at, c.at)
		} else {
			c2.held <- nil
		}
		<-l.done
	})
}

// TestLoop_fanInQuietsOnlyTheFalseKey: in a batch's wait, a false
// announcement quiets its key alone; another key's announcement still
// wakes a look, at that key alone.
func TestLoop_fanInQuietsOnlyTheFalseKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		heard := make(chan string, 4)
		l := start(t.Context(), []string{"a", "b", "c"}, Sub{Heard: heard}, time.Minute)
		heard <- "a"
		c := l.next(t)
		if !slices.Equal(c.keys, []string{"a"}) || !c.announced {
			t.Fatalf("looked at %v (announced %v); want [a], announced", c.keys, c.announced)
		}
		c.held <- []string{"a"} // a false announcement
		heard <- "a"
		l.none(t, "a announced again after a false announcement")
		heard <- "b"
		c = l.next(t)
		if !slices.Equal(c.keys, []string{"b"}) || !c.announced || c.at != 0 {
			t.Fatalf("looked at %v (announced %v) after %v; want [b], announced, at once", c.keys, c.announced, c.at)
		}
		c.held <- nil // b's value landed
		c = l.next(t)
		if !slices.Equal(c.keys, []string{"a", "c"}) || c.announced {
			t.Fatalf("looked at %v (announced %v); want the poll's look at [a c]", c.keys, c.announced)
		}
		c.held <- nil
		if left := <-l.done; left != nil {
			t.Errorf("the loop returned %v; want none", left)
		}
	})
}

// TestLoop_pollLooksAtEveryPendingKey: without announcements, each poll
// tick looks at every key still waited for.
func TestLoop_pollLooksAtEveryPendingKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := start(t.Context(), []string{"a", "b", "c"}, Sub{Heard: make(chan string, 1)}, time.Minute)
		c := l.next(t)
		if !slices.Equal(c.keys, []string{"a", "b", "c"}) || c.announced || c.at == 0 {
			t.Fatalf("looked at %v (announced %v) after %v; want the poll's look at [a b c]", c.keys, c.announced, c.at)
		}
		c.held <- []string{"a", "c"}
		c = l.next(t)
		if !slices.Equal(c.keys, []string{"a", "c"}) || c.announced {
			t.Fatalf("looked at %v (announced %v); want the poll's look at [a c]", c.keys, c.announced)
		}
		c.held <- []string{"c"}
		c = l.next(t)
		if !slices.Equal(c.keys, []string{"c"}) {
			t.Fatalf("looked at %v; want the poll's look at [c]", c.keys)
		}
		c.held <- nil
		<-l.done
	})
}

// TestLoop_maxWaitSpentLoadsTheHeldKeys: once MaxWait is spent with keys
// still held, Spent gets them, at MaxWait, and the loop returns none.
func TestLoop_maxWaitSpentLoadsTheHeldKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxWait = time.Second
		heard := make(chan string, 1)
		l := start(t.Context(), []string{"a", "b", "c"}, Sub{Heard: heard}, maxWait)
		heard <- "b"
		c := l.next(t)
		c.held <- nil // b's value landed
		for {
			select {
			case c := <-l.looks:
				c.held <- c.keys // the holder lives
				continue
			case s := <-l.spents:
				if !slices.Equal(s.keys, []string{"a", "c"}) || s.at != maxWait {
					t.Errorf("spent %v after %v; want [a c] after %v", s.keys, s.at, maxWait)
				}
			case left := <-l.done:
				t.Fatalf("the loop returned %v without spending MaxWait", left)
			}
			break
		}
		if left := <-l.done; left != nil {
			t.Errorf("the loop returned %v; want none", left)
		}
	})
}

// TestLoop_ctxEndReturnsThePendingKeys: a wait whose ctx ends returns the
// keys still waited for, and spends nothing.
func TestLoop_ctxEndReturnsThePendingKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		heard := make(chan string, 1)
		l := start(ctx, []string{"a", "b", "c"}, Sub{Heard: heard}, time.Minute)
		heard <- "b"
		c := l.next(t)
		c.held <- nil // b's value landed
		synctest.Wait()
		cancel()
		if left := <-l.done; !slices.Equal(left, []string{"a", "c"}) {
			t.Errorf("the loop returned %v; want [a c]", left)
		}
		select {
		case s := <-l.spents:
			t.Errorf("spent %v", s.keys)
		default:
		}
	})
}

// TestRemaining: the keys still waited for are those not looked at and
// those the look found held, in their order.
func TestRemaining(t *testing.T) {
	for _, tc := range []struct {
		pending, looked, still, want []string
	}{
		{[]string{"a", "b", "c"}, []string{"a", "b", "c"}, []string{"b"}, []string{"b"}},
		{[]string{"a", "b", "c"}, []string{"b"}, []string{"b"}, []string{"a", "b", "c"}},
		{[]string{"a", "b", "c", "d"}, []string{"b", "d"}, []string{"d"}, []string{"a", "c", "d"}},
		{[]string{"a", "b", "c"}, []string{"a", "c"}, nil, []string{"b"}},
	} {
		if got := remaining(slices.Clone(tc.pending), tc.looked, tc.still); !slices.Equal(got, tc.want) {
			t.Errorf("remaining(%v, %v, %v) = %v; want %v", tc.pending, tc.looked, tc.still, got, tc.want)
		}
	}
}
