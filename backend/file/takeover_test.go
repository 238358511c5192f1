//go:build unix

package file

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/herdguard/herdguard/lock"
)

// takeoverBound is how soon after a holder's SIGKILL its lock must be
// taken over: its flock dies with it, so the next TryAcquire takes over.
// The margin is for a loaded machine; the two beats a hung holder is
// given (two seconds with the default heartbeat) are far above it.
const takeoverBound = 500 * time.Millisecond

// racers is the number of processes that race for each lock, as pods do
// for a cold key.
const racers = 4

// childRace races for locks: for each line "try <key>" on stdin it makes
// one TryAcquire of key (its view has the default heartbeat) and prints
// "won <fence> <grant time in Unix nanoseconds>", then beats as a holder
// does, or "lost". After "beat" it extends its grant at once and prints
// "beat".
func childRace(cfg childConfig) error {
	s, err := openChild(cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Println("ready")
	ctx := context.Background()
	var held *lock.Lease
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd, arg, _ := strings.Cut(in.Text(), " ")
		switch cmd {
		case "try":
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			l, err := s.TryAcquire(actx, arg, cfg.Lease)
			cancel()
			switch {
			case errors.Is(err, lock.ErrNotAcquired):
				fmt.Println("lost")
			case err != nil:
				return err
			default:
				at := time.Now().UnixNano()
				l.KeepAlive(ctx, nil)
				held = l
				fmt.Printf("won %d %d\n", l.Fence(), at)
			}
		case "beat":
			if held == nil {
				return errors.New("beat without a grant")
			}
			if err := held.Extend(ctx, cfg.Lease); err != nil {
				return err
			}
			fmt.Println("beat")
		}
	}
	return in.Err()
}

// takeoverRun is one round: the racers race for key, the winner is
// SIGKILLed (after one beat, with beat), and this process takes the lock
// over. It returns the time from the kill to the takeover and the winner's
// index, to be replaced.
func takeoverRun(t *testing.T, s *Shared, rs []*child, key string, beat bool) (time.Duration, int) {
	t.Helper()
	ctx := context.Background()
	for _, c := range rs {
		if _, err := fmt.Fprintf(c.stdin, "try %s\n", key); err != nil {
			t.Fatal(err)
		}
	}
	winner, fence := -1, int64(0)
	var grantAt time.Time
	for i, c := range rs {
		line := c.expect(t, "", 30*time.Second)
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "won" && winner < 0:
			winner = i
			fence, _ = strconv.ParseInt(f[1], 10, 64)
			at, _ := strconv.ParseInt(f[2], 10, 64)
			grantAt = time.Unix(0, at)
		case line == "lost":
		default:
			t.Fatalf("racer %d: %q (winner so far %d)", i, line, winner)
		}
	}
	if winner < 0 {
		t.Fatalf("%s: nobody won", key)
	}
	w := rs[winner]
	if beat {
		if _, err := w.stdin.Write([]byte("beat\n")); err != nil {
			t.Fatal(err)
		}
		w.expect(t, "beat", 30*time.Second)
	}
	killed := time.Now()
	if err := w.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if !beat && killed.Sub(grantAt) >= DefaultHeartbeat {
		t.Fatalf("%s: killed %v after the grant: its first beat may have run", key, killed.Sub(grantAt))
	}
	// Try the lock as a waiter that polls hard would, until well past the
	// two beats a hung holder is given.
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		l, err := s.TryAcquire(ctx, key, time.Minute)
		if err == nil {
			took := time.Since(killed)
			if !l.TookOver() || l.Fence() <= fence {
				t.Fatalf("%s: took over %v, fence %d after the holder's %d", key, l.TookOver(), l.Fence(), fence)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			return took, winner
		}
		if !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatal(err)
		}
		if time.Since(killed) > 4*DefaultHeartbeat {
			t.Fatalf("%s: the killed holder's lock was not taken over in %v", key, time.Since(killed))
		}
		<-tick.C
	}
}

// testTakeoverOfKilledRacer runs n rounds of takeoverRun and fails on
// every takeover slower than takeoverBound.
func testTakeoverOfKilledRacer(t *testing.T, n int, beat bool) {
	dir := t.TempDir()
	cfg := childConfig{Dir: dir, Namespace: "race", Lease: 30 * time.Second}
	start := func() *child {
		c := startChild(t, "race", cfg)
		c.expect(t, "ready", 60*time.Second)
		return c
	}
	rs := make([]*child, racers)
	for i := range rs {
		rs[i] = start()
	}
	s := openTest(t, dir, "race", 0)
	var worst time.Duration
	slow := 0
	for i := range n {
		took, winner := takeoverRun(t, s, rs, "k"+strconv.Itoa(i), beat)
		worst = max(worst, took)
		if took >= takeoverBound {
			slow++
			t.Errorf("run %d: the killed holder was taken over after %v, want < %v", i, took, takeoverBound)
		}
		rs[winner] = start()
	}
	t.Logf("%d runs, %d slow, worst takeover %v", n, slow, worst)
}

// TestTakeoverOfKilledRacer_beforeFirstBeat: 4 processes race for a lock
// (as pods do for a cold key) and the winner is SIGKILLed at once, before
// its first beat; its lock is taken over within takeoverBound, in every
// one of 100 rounds.
func TestTakeoverOfKilledRacer_beforeFirstBeat(t *testing.T) {
	testTakeoverOfKilledRacer(t, 100, false)
}

// TestTakeoverOfKilledRacer_afterFirstBeat is the same with the winner
// killed after its first beat.
func TestTakeoverOfKilledRacer_afterFirstBeat(t *testing.T) {
	testTakeoverOfKilledRacer(t, 20, true)
}
