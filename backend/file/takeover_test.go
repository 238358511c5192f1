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
	"sync"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/resilience"
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
// one TryAcquire of key (its view beats every cfg.Heartbeat) and prints
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
	var held *backend.Lease
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd, arg, _ := strings.Cut(in.Text(), " ")
		switch cmd {
		case "try":
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			l, err := s.TryAcquire(actx, arg, cfg.Lease)
			cancel()
			switch {
			case errors.Is(err, backend.ErrNotAcquired):
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

// killHolder SIGKILLs c and returns when its process is gone (reaped: the
// kernel has closed its files and dropped its flocks). On a loaded machine
// the process may take a while to die; what the backend is responsible
// for is counted from then.
func killHolder(t *testing.T, c *child) time.Time {
	t.Helper()
	if err := c.Kill(time.Minute); err != nil {
		t.Fatal(err)
	}
	return time.Now()
}

// takeoverRun is one round: the racers race for key, the winner is
// SIGKILLed (after one beat, with beat), and this process takes the lock
// over. It returns the time to the takeover from the holder's death and
// from its SIGKILL, and the winner's index, to be replaced.
func takeoverRun(t *testing.T, s *Shared, rs []*child, key string, heartbeat time.Duration, beat bool) (took, sinceKill time.Duration, winner int) {
	t.Helper()
	ctx := context.Background()
	for _, c := range rs {
		c.send(t, "try "+key)
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
		w.send(t, "beat")
		w.expect(t, "beat", 30*time.Second)
	}
	killed := time.Now()
	if !beat && killed.Sub(grantAt) >= heartbeat {
		t.Fatalf("%s: killed %v after the grant: its first beat may have run", key, killed.Sub(grantAt))
	}
	dead := killHolder(t, w)
	// Try the lock as a waiter that polls hard would, until well past the
	// two beats a hung holder is given.
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		l, err := s.TryAcquire(ctx, key, time.Minute)
		if err == nil {
			took, sinceKill = time.Since(dead), time.Since(killed)
			if !l.TookOver() || l.Fence() <= fence {
				t.Fatalf("%s: took over %v, fence %d after the holder's %d", key, l.TookOver(), l.Fence(), fence)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			return took, sinceKill, winner
		}
		if !errors.Is(err, backend.ErrNotAcquired) {
			t.Fatal(err)
		}
		if time.Since(dead) > 4*heartbeat {
			t.Fatalf("%s: the killed holder's lock was not taken over in %v", key, time.Since(dead))
		}
		<-tick.C
	}
}

// testTakeoverOfKilledRacer runs n rounds of takeoverRun and fails on
// every takeover slower than takeoverBound.
func testTakeoverOfKilledRacer(t *testing.T, n int, heartbeat time.Duration, beat bool) {
	dir := t.TempDir()
	cfg := childConfig{Dir: dir, Namespace: "race", Heartbeat: heartbeat, Lease: 30 * time.Second}
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
	var worst, worstKill time.Duration
	slow := 0
	for i := range n {
		took, sinceKill, winner := takeoverRun(t, s, rs, "k"+strconv.Itoa(i), heartbeat, beat)
		worst, worstKill = max(worst, took), max(worstKill, sinceKill)
		if took >= takeoverBound {
			slow++
			t.Errorf("run %d: the killed holder was taken over after %v, want < %v", i, took, takeoverBound)
		}
		rs[winner] = start()
	}
	t.Logf("%d runs, %d slow, worst takeover %v after the holder's death (%v after its SIGKILL)", n, slow, worst, worstKill)
}

// TestTakeoverOfKilledRacer_beforeFirstBeat: 4 processes race for a lock
// (as pods do for a cold key) and the winner is SIGKILLed at once, before
// its first beat (its heartbeat is 3 s); its lock is taken over within
// takeoverBound of its death, in every one of 100 rounds.
func TestTakeoverOfKilledRacer_beforeFirstBeat(t *testing.T) {
	testTakeoverOfKilledRacer(t, 100, 3*time.Second, false)
}

// TestTakeoverOfKilledRacer_afterFirstBeat is the same with the default
// heartbeat and the winner killed after its first beat.
func TestTakeoverOfKilledRacer_afterFirstBeat(t *testing.T) {
	testTakeoverOfKilledRacer(t, 20, DefaultHeartbeat, true)
}

// childGetter is a pod: a pipeline on the backend with the default lock
// settings but cfg.Heartbeat. For each line "get <key> <load time>" on
// stdin it Gets key on a goroutine of its own; its load prints "load
// <key> <Unix nanoseconds>" and takes the load time; the Get prints "got
// <key>" or "error <key> <error>".
func childGetter(cfg childConfig) error {
	fb, err := New(cfg.Dir, Options{})
	if err != nil {
		return err
	}
	p, err := resilience.New[string](cfg.Namespace).
		Cache(time.Minute).
		Backend(fb).
		Lock(resilience.LockSettings{Heartbeat: cfg.Heartbeat}).
		Build()
	if err != nil {
		return err
	}
	defer p.Close()
	var outMu sync.Mutex
	say := func(format string, a ...any) {
		outMu.Lock()
		fmt.Printf(format+"\n", a...)
		outMu.Unlock()
	}
	fmt.Println("ready")
	var wg sync.WaitGroup
	defer wg.Wait()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) != 3 || f[0] != "get" {
			return fmt.Errorf("bad command %q", in.Text())
		}
		key := f[1]
		d, err := time.ParseDuration(f[2])
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := p.Get(ctx, key, func(ctx context.Context, key string) (string, error) {
				say("load %s %d", key, time.Now().UnixNano())
				time.Sleep(d)
				return "v:" + key, nil
			})
			if err != nil {
				say("error %s %v", key, err)
				return
			}
			say("got %s", key)
		}()
	}
	return in.Err()
}

// stressEnv runs the pipeline's takeover rounds 100 times each:
//
//	HERDGUARD_STRESS=1 go test -count=1 -run TestPipelineTakeover -v ./backend/file
const stressEnv = "HERDGUARD_STRESS"

// testPipelineTakeover: 3 pods wait for a key a fourth is loading; the
// loading pod is SIGKILLed after the round's delay, and one of the others
// loads within takeoverBound (the waiters poll up to a second apart: they
// must be woken), and each of them gets the value.
func testPipelineTakeover(t *testing.T, rounds int, heartbeat time.Duration, delays []time.Duration) {
	dir := t.TempDir()
	cfg := childConfig{Dir: dir, Namespace: "pipekill", Heartbeat: heartbeat}
	start := func() *child {
		c := startChild(t, "getter", cfg)
		c.expect(t, "ready", 60*time.Second)
		return c
	}
	ws := []*child{start(), start(), start()}
	if os.Getenv(stressEnv) != "" {
		rounds = 100
	}
	var worst, worstKill time.Duration
	for i := range rounds {
		key := "k" + strconv.Itoa(i)
		delay := delays[i%len(delays)]
		h := start()
		h.send(t, "get "+key+" 1h")
		h.expect(t, "load "+key+" ", 30*time.Second)
		for _, w := range ws {
			w.send(t, "get "+key+" 100ms")
		}
		time.Sleep(delay) // the holder is killed this far into its load
		killed := time.Now()
		dead := killHolder(t, h)
		var loads []time.Time
		for j, w := range ws {
			for {
				line := w.expect(t, "", 60*time.Second)
				f := strings.Fields(line)
				if len(f) == 3 && f[0] == "load" && f[1] == key {
					at, _ := strconv.ParseInt(f[2], 10, 64)
					loads = append(loads, time.Unix(0, at))
					continue
				}
				if line == "got "+key {
					break
				}
				t.Fatalf("round %d, pod %d: %q", i, j, line)
			}
		}
		if len(loads) != 1 {
			t.Fatalf("round %d: %d loads after the holder's death, want 1", i, len(loads))
		}
		took := max(loads[0].Sub(dead), 0) // a waiter may load before this process reaped the holder
		worst, worstKill = max(worst, took), max(worstKill, loads[0].Sub(killed))
		if took >= takeoverBound {
			t.Errorf("round %d: holder killed %v into its load was taken over after %v, want < %v", i, delay, took, takeoverBound)
		}
	}
	t.Logf("%d rounds, worst takeover %v after the holder's death (%v after its SIGKILL)", rounds, worst, worstKill)
}

// TestPipelineTakeover_beforeFirstBeat: with a 3 s heartbeat, the holder
// is killed before its first beat, up to 1.8 s into its load.
func TestPipelineTakeover_beforeFirstBeat(t *testing.T) {
	var delays []time.Duration
	for d := time.Duration(0); d < 2*time.Second; d += 200 * time.Millisecond {
		delays = append(delays, d)
	}
	testPipelineTakeover(t, 20, 3*time.Second, delays)
}

// TestPipelineTakeover_afterFirstBeat: with the default heartbeat (1 s),
// the holder is killed after its first beat.
func TestPipelineTakeover_afterFirstBeat(t *testing.T) {
	testPipelineTakeover(t, 12, 0, []time.Duration{1200 * time.Millisecond, 1500 * time.Millisecond, 1800 * time.Millisecond})
}
