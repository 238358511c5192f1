//go:build unix

package file

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/herdguard/herdguard/resilience"
)

// The pipeline children (role "pipeline") run a real pipeline on the
// backend: each prints "ready", waits for a line on stdin, then has
// cfg.Callers callers Get every key of cfg.Keys (or, with cfg.Loop, Get
// keys over and over until stdin closes), and prints "done <calls>
// <errors> <wrong values> <first error>". Every load appends "<pid>
// <key>" to cfg.Loads (O_APPEND) and prints "load <key>"; it takes
// cfg.Sleep.

// newFilePipeline builds the pipeline the children and the figures use.
func newFilePipeline(dir, name string, heartbeat time.Duration) (*resilience.Pipeline[string], error) {
	fb, err := New(dir, Options{})
	if err != nil {
		return nil, err
	}
	return resilience.New[string](name).
		Cache(time.Minute).
		Backend(fb).
		Lock(resilience.LockSettings{Lease: 10 * time.Second, Heartbeat: heartbeat, Poll: 50 * time.Millisecond, MaxWait: time.Minute}).
		Build()
}

func childPipeline(cfg childConfig) error {
	p, err := newFilePipeline(cfg.Dir, cfg.Namespace, cfg.Heartbeat)
	if err != nil {
		return err
	}
	defer p.Close()
	loads, err := os.OpenFile(cfg.Loads, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer loads.Close()
	var outMu sync.Mutex
	say := func(format string, a ...any) {
		outMu.Lock()
		fmt.Printf(format+"\n", a...)
		outMu.Unlock()
	}
	load := func(ctx context.Context, key string) (string, error) {
		if _, err := fmt.Fprintf(loads, "%d %s\n", os.Getpid(), key); err != nil {
			return "", err
		}
		if !cfg.Loop {
			say("load %s", key)
		}
		time.Sleep(cfg.Sleep)
		if !cfg.Loop {
			say("loaded %s %d", key, time.Now().UnixNano())
		}
		return "v:" + key, nil
	}
	say("ready")
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		return err
	}
	stopLoop := make(chan struct{})
	if cfg.Loop {
		go func() {
			_, _ = in.ReadString('\n')
			close(stopLoop)
		}()
	}
	var calls, errs, wrong atomic.Int64
	var firstErr, firstOpen atomic.Value
	var failedOpen atomic.Int64
	var wg sync.WaitGroup
	for c := range cfg.Callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				if cfg.Loop {
					select {
					case <-stopLoop:
						return
					default:
					}
				} else if i >= len(cfg.Keys) {
					return
				}
				key := cfg.Keys[(i+c)%len(cfg.Keys)]
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				r, err := p.GetResult(ctx, key, load)
				v := r.Value
				cancel()
				calls.Add(1)
				if r.FailedOpen {
					failedOpen.Add(1)
					firstOpen.CompareAndSwap(nil, fmt.Sprint(r.FailOpenCause))
				}
				switch {
				case err != nil:
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				case v != "v:"+key:
					wrong.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	first, _ := firstErr.Load().(string)
	if n := failedOpen.Load(); n > 0 {
		open, _ := firstOpen.Load().(string)
		fmt.Fprintf(os.Stderr, "child %d: %d calls failed open: %s\n", os.Getpid(), n, open)
	}
	say("done %d %d %d %s", calls.Load(), errs.Load(), wrong.Load(), first)
	return nil
}

// pods starts n pipeline children with cfg and waits until they are ready.
func pods(t *testing.T, n int, cfg childConfig) []*child {
	t.Helper()
	cs := make([]*child, n)
	for i := range cs {
		cs[i] = startChild(t, "pipeline", cfg)
	}
	for _, c := range cs {
		c.expect(t, "ready", 60*time.Second)
	}
	return cs
}

func goAll(t *testing.T, cs []*child) {
	t.Helper()
	for _, c := range cs {
		c.send(t, "go")
	}
}

// done waits for a child's summary and fails the test on an error or a
// wrong value; it returns the number of calls.
func (c *child) done(t *testing.T) int {
	t.Helper()
	f := strings.SplitN(strings.TrimPrefix(c.expect(t, "done ", 3*time.Minute), "done "), " ", 4)
	calls, _ := strconv.Atoi(f[0])
	if f[1] != "0" || f[2] != "0" {
		t.Errorf("child: %s errors, %s wrong values; first error: %s", f[1], f[2], f[3])
	}
	return calls
}

// loadsOf reads the loads file: loads per key.
func loadsOf(t *testing.T, path string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	n := make(map[string]int)
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if _, key, ok := strings.Cut(l, " "); ok {
			n[key]++
		}
	}
	return n
}

// TestPipelineOneColdKey: 8 processes of 64 callers each on one cold key
// load it once in all.
func TestPipelineOneColdKey(t *testing.T) {
	dir := t.TempDir()
	loads := dir + "/loads"
	cs := pods(t, 8, childConfig{Dir: dir + "/hg", Namespace: "one", Keys: []string{"hot"}, Callers: 64, Sleep: 100 * time.Millisecond, Loads: loads, Heartbeat: time.Second})
	goAll(t, cs)
	for _, c := range cs {
		c.done(t)
	}
	if n := loadsOf(t, loads); n["hot"] != 1 || len(n) != 1 {
		t.Fatalf("loads = %v, want hot once", n)
	}
}

// TestPipelineBurst: a burst of 100 cold keys in 4 processes loads each
// key once.
func TestPipelineBurst(t *testing.T) {
	dir := t.TempDir()
	loads := dir + "/loads"
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	cs := pods(t, 4, childConfig{Dir: dir + "/hg", Namespace: "burst", Keys: keys, Callers: 16, Sleep: 100 * time.Millisecond, Loads: loads, Heartbeat: time.Second})
	goAll(t, cs)
	for _, c := range cs {
		c.done(t)
	}
	n := loadsOf(t, loads)
	for _, k := range keys {
		if n[k] != 1 {
			t.Errorf("key %s loaded %d times", k, n[k])
		}
	}
	if len(n) != len(keys) {
		t.Errorf("loads of %d keys, want %d", len(n), len(keys))
	}
}

// TestPipelineHolderKilled: the process loading the key is SIGKILLed
// mid-load; one other process takes over at once and loads once more, and
// every other caller gets its value.
func TestPipelineHolderKilled(t *testing.T) {
	dir := t.TempDir()
	loads := dir + "/loads"
	base := childConfig{Dir: dir + "/hg", Namespace: "killed", Keys: []string{"hot"}, Callers: 1, Loads: loads, Heartbeat: 10 * time.Second}
	holder := startChild(t, "pipeline", withSleep(base, time.Hour))
	holder.expect(t, "ready", 60*time.Second)
	goAll(t, []*child{holder})
	holder.expect(t, "load hot", 60*time.Second)
	base.Callers = 16
	cs := pods(t, 4, withSleep(base, 100*time.Millisecond))
	goAll(t, cs)
	time.Sleep(200 * time.Millisecond) // they wait for the holder
	if err := holder.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		c.done(t)
	}
	if n := loadsOf(t, loads); n["hot"] != 2 {
		t.Fatalf("loads = %v, want the killed one and one more", n)
	}
}

func withSleep(c childConfig, d time.Duration) childConfig { c.Sleep = d; return c }

// TestPipelineDirectoryRemoved: the backend's directory is removed while
// 4 processes run calls over 50 keys: no caller sees an error.
func TestPipelineDirectoryRemoved(t *testing.T) {
	dir := t.TempDir()
	keys := make([]string, 50)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	cs := pods(t, 4, childConfig{Dir: dir + "/hg", Namespace: "removed", Keys: keys, Callers: 8, Sleep: 5 * time.Millisecond, Loads: dir + "/loads", Heartbeat: time.Second, Loop: true})
	goAll(t, cs)
	for range 5 {
		time.Sleep(300 * time.Millisecond)
		if _, err := os.Stat(dir + "/hg"); err == nil {
			removeDir(t, dir+"/hg")
		}
	}
	// The processes heard that the directory went (their caches were
	// dropped) and wrote their values into it again: well before their
	// in-process copies would have expired on their own (a minute).
	deadline := time.Now().Add(20 * time.Second)
	for {
		vs, _ := filepath.Glob(dir + "/hg/ns-*/v/*")
		if len(vs) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no value written after the directory was removed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	goAll(t, cs) // stop
	total := 0
	for _, c := range cs {
		total += c.done(t)
	}
	if total == 0 {
		t.Fatal("no calls")
	}
}

// TestFiguresPipeline measures, with the pipeline on the backend: a cold
// miss for the winner (a loader that returns at once), an L2 hit (another
// pipeline of the same name, so its L1 is cold), and the delay from the
// holder's commit (its loader returning, in another process) to a waiter
// in this process returning the value.
func TestFiguresPipeline(t *testing.T) {
	skipUnlessFigures(t)
	ctx := context.Background()
	dir := t.TempDir()
	a, err := newFilePipeline(dir+"/hg", "fig", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := newFilePipeline(dir+"/hg", "fig", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	load := func(_ context.Context, key string) (string, error) { return "v:" + key, nil }
	const n = 1000
	cold := make([]time.Duration, 0, n)
	hit := make([]time.Duration, 0, n)
	for i := range n {
		key := "cold:" + strconv.Itoa(i)
		start := time.Now()
		r, err := a.GetResult(ctx, key, load)
		cold = append(cold, time.Since(start))
		if err != nil || r.Source != resilience.SourceLoader {
			t.Fatal(r, err)
		}
		start = time.Now()
		r, err = b.GetResult(ctx, key, load)
		hit = append(hit, time.Since(start))
		if err != nil || r.Source != resilience.SourceL2 {
			t.Fatal(r.Source, err)
		}
	}
	c50, c99 := quantiles(cold)
	h50, h99 := quantiles(hit)
	fmt.Printf("FIGURES file pipeline cold-miss-winner p50=%v p99=%v n=%d\n", c50, c99, n)
	fmt.Printf("FIGURES file pipeline l2-hit p50=%v p99=%v n=%d\n", h50, h99, n)

	const rounds = 30
	wake := make([]time.Duration, 0, rounds)
	for i := range rounds {
		key := "wake:" + strconv.Itoa(i)
		h := startChild(t, "pipeline", childConfig{Dir: dir + "/hg", Namespace: "fig", Keys: []string{key}, Callers: 1, Sleep: 150 * time.Millisecond, Loads: dir + "/loads", Heartbeat: time.Second})
		h.expect(t, "ready", 60*time.Second)
		goAll(t, []*child{h})
		h.expect(t, "load "+key, 60*time.Second)
		r, err := a.GetResult(ctx, key, load)
		end := time.Now()
		if err != nil || r.Value != "v:"+key || r.Source == resilience.SourceLoader {
			t.Fatal(r, err)
		}
		at, err := strconv.ParseInt(strings.Fields(h.expect(t, "loaded "+key, 60*time.Second))[2], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		wake = append(wake, end.Sub(time.Unix(0, at)))
		h.done(t)
	}
	w50, w99 := quantiles(wake)
	fmt.Printf("FIGURES file pipeline wake-after-commit p50=%v p99=%v n=%d\n", w50, w99, rounds)
}
