package postgres

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herdguard/herdguard/internal/podproc"
	"github.com/herdguard/herdguard/resilience"
)

// podEnv carries a pod's configuration, as JSON, from the parent test to
// the child process it starts: each pod is a process of its own, as the
// pods of a service are.
const podEnv = "HERDGUARD_PG_POD"

// podConfig is what one pod needs to know.
type podConfig struct {
	Pod    int      `json:"pod"`
	DSN    string   `json:"dsn"`
	Prefix string   `json:"prefix"`
	Name   string   `json:"name"` // the pipeline's name
	Keys   []string `json:"keys"` // each caller gets every key, in turn
	// NKeys, if positive, replaces Keys with cold:0 to cold:NKeys-1, which
	// would not fit the pod's environment.
	NKeys   int           `json:"nkeys,omitempty"`
	Callers int           `json:"callers"`          // concurrent callers per key
	Load    time.Duration `json:"load"`             // how long a load takes
	Hold    bool          `json:"hold,omitempty"`   // a load never ends (the pod is to be killed)
	Beat    time.Duration `json:"beat,omitempty"`   // the lock's heartbeat
	Lease   time.Duration `json:"lease,omitempty"`  // the lock's lease (default 30s)
	Repeat  time.Duration `json:"repeat,omitempty"` // keep calling for this long
	Pause   time.Duration `json:"pause,omitempty"`  // between a caller's calls
	// Parallel gives every key callers of its own, all at once.
	Parallel bool          `json:"parallel,omitempty"`
	Fresh    time.Duration `json:"fresh,omitempty"`   // the values' time to live
	Counted  bool          `json:"counted,omitempty"` // report every result, not a summary
	// The pipeline's backend operation timeout and breaker open time;
	// zero for the library's defaults.
	OpTimeout   time.Duration `json:"op_timeout,omitempty"`
	BreakerOpen time.Duration `json:"breaker_open,omitempty"`
	// Many asks every key in one GetMany, whose loader takes Load for
	// the keys it is given; each key's result is reported.
	Many bool `json:"many,omitempty"`
	// Summary reports a GetMany in one event (see summary) instead of
	// one per key and load: for batches of 100,000 keys.
	Summary bool `json:"summary,omitempty"`
}

// event is a pod -> parent message, one JSON line on the pod's stdout.
type event struct {
	Ev     string `json:"ev"` // "ready", "load", "result", "done"
	Pod    int    `json:"pod"`
	Key    string `json:"key,omitempty"`
	Value  string `json:"value,omitempty"`
	Source string `json:"source,omitempty"`
	Err    string `json:"err,omitempty"`
	N      int    `json:"n,omitempty"` // done: how many calls
	// Summary is a GetMany's report with podConfig.Summary.
	Summary *summary `json:"summary,omitempty"`
}

// podMain runs this process as a pod configured by cfg (JSON): it builds
// its getter, says ready, waits for "go" on stdin, runs its callers,
// reports, and exits.
func podMain(cfg string) int {
	var c podConfig
	if err := json.Unmarshal([]byte(cfg), &c); err != nil {
		fmt.Fprintf(os.Stderr, "pod: bad %s: %v\n", podEnv, err)
		return 2
	}
	if c.NKeys > 0 {
		c.Keys = coldKeys(c.NKeys)
	}
	if err := runPod(c, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "pod %d: %v\n", c.Pod, err)
		return 1
	}
	return 0
}

// getFunc is how a pod's callers get a key's value through the backend:
// the value and where it came from.
type getFunc func(ctx context.Context, key string, load func(ctx context.Context, key string) (string, error)) (string, string, error)

// manyFunc is a pod's GetMany.
type manyFunc func(ctx context.Context, keys []string, load resilience.LoadManyFunc[string]) (map[string]resilience.Result[string], error)

func runPod(c podConfig, in io.Reader, out io.Writer) error {
	em := podproc.NewWriter(out)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, c.DSN)
	if err != nil {
		return err
	}
	defer pool.Close()
	b, err := New(pool, Options{Prefix: c.Prefix})
	if err != nil {
		return err
	}
	get, many, closeGet, err := newGetter(b, c)
	if err != nil {
		return err
	}
	defer closeGet()
	em.Emit(event{Ev: "ready", Pod: c.Pod})
	if line, err := bufio.NewReader(in).ReadString('\n'); err != nil || line != "go\n" {
		return fmt.Errorf("waiting for go: %q, %v", line, err)
	}
	load := func(ctx context.Context, key string) (string, error) {
		em.Emit(event{Ev: "load", Pod: c.Pod, Key: key})
		if c.Hold {
			<-ctx.Done() // until killed
			return "", ctx.Err()
		}
		t := time.NewTimer(c.Load)
		defer t.Stop()
		select {
		case <-t.C:
			return fmt.Sprintf("%s@pod%d", key, c.Pod), nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if c.Many {
		manyPod(ctx, c, em, many)
		return nil
	}
	var calls atomic.Int64
	end := time.Now().Add(c.Repeat)
	call := func(keys []string) {
		for {
			for _, k := range keys {
				cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				v, src, err := get(cctx, k, load)
				cancel()
				calls.Add(1)
				if c.Counted || err != nil {
					ev := event{Ev: "result", Pod: c.Pod, Key: k, Value: v, Source: src}
					if err != nil {
						ev.Err = err.Error()
					}
					em.Emit(ev)
				}
				time.Sleep(c.Pause)
			}
			if !time.Now().Before(end) {
				return
			}
		}
	}
	// Each caller walks its keys in turn; with Parallel, every key has
	// callers of its own.
	seqs := [][]string{c.Keys}
	if c.Parallel {
		seqs = nil
		for _, k := range c.Keys {
			seqs = append(seqs, []string{k})
		}
	}
	var wg sync.WaitGroup
	for range max(c.Callers, 1) {
		for _, keys := range seqs {
			wg.Go(func() { call(keys) })
		}
	}
	wg.Wait()
	em.Emit(event{Ev: "done", Pod: c.Pod, N: int(calls.Load())})
	return nil
}

// fleet is the parent's view of its pods.
type fleet struct {
	t      *testing.T
	procs  []*podproc.Proc
	events chan event // every pod's, in the order their readers got them
}

// startPods starts one pod per config and waits until each is ready.
func startPods(t *testing.T, cfgs []podConfig) *fleet {
	t.Helper()
	f := &fleet{t: t, events: make(chan event, 1<<16)}
	for _, c := range cfgs {
		env, err := podproc.JSONEnv(podEnv, c)
		if err != nil {
			t.Fatal(err)
		}
		f.procs = append(f.procs, podproc.Start(t, podproc.Spec{
			Name: fmt.Sprintf("pod %d", c.Pod), Env: []string{env}, Stderr: os.Stderr,
			MaxLine: 256 << 20, // a summary of 100,000 keys
			OnLine: func(line []byte) {
				var ev event
				if json.Unmarshal(line, &ev) == nil {
					f.events <- ev
				}
			},
		}))
	}
	ready := 0
	for ready < len(cfgs) {
		ev := f.next(time.Minute)
		if ev.Ev == "ready" {
			ready++
		}
	}
	return f
}

// next returns the next event, failing the test after d.
func (f *fleet) next(d time.Duration) event {
	f.t.Helper()
	select {
	case ev := <-f.events:
		return ev
	case <-time.After(d):
		f.t.Fatalf("no event from the pods for %v", d)
		return event{}
	}
}

// goAll tells the pods in which to start.
func (f *fleet) goAll(which ...int) {
	for _, i := range which {
		if err := f.procs[i].Send("go"); err != nil {
			f.t.Fatal(err)
		}
	}
}

// tally is what the pods reported.
type tally struct {
	loads   map[string]int // by key
	results int
	errs    []string
	values  map[string]map[string]int // key -> value -> results
	sources map[string]int            // results by source
	done    int
	took    []time.Duration // each summarized GetMany's time
}

// collect reads events until `done` pods reported done; onLoad, if not
// nil, sees each load as it is reported.
func (f *fleet) collect(done int, onLoad func(event)) tally {
	f.t.Helper()
	tl := tally{loads: map[string]int{}, values: map[string]map[string]int{}, sources: map[string]int{}}
	for tl.done < done {
		ev := f.next(3 * time.Minute)
		switch ev.Ev {
		case "load":
			tl.loads[ev.Key]++
			if onLoad != nil {
				onLoad(ev)
			}
		case "result":
			if ev.Err != "" {
				tl.errs = append(tl.errs, fmt.Sprintf("pod %d %s: %s", ev.Pod, ev.Key, ev.Err))
				continue
			}
			if tl.values[ev.Key] == nil {
				tl.values[ev.Key] = map[string]int{}
			}
			tl.values[ev.Key][ev.Value]++
			tl.sources[ev.Source]++
		case "done":
			tl.done++
			tl.results += ev.N
			if sm := ev.Summary; sm != nil {
				tl.took = append(tl.took, time.Duration(sm.TookUS)*time.Microsecond)
				for _, k := range sm.Loaded {
					tl.loads[k]++
				}
				for k, src := range sm.Sources {
					if e, ok := sm.Errs[k]; ok {
						tl.errs = append(tl.errs, fmt.Sprintf("pod %d %s: %s", ev.Pod, k, e))
						continue
					}
					if tl.values[k] == nil {
						tl.values[k] = map[string]int{}
					}
					tl.values[k][sm.Values[k]]++
					tl.sources[src]++
				}
			}
		}
	}
	return tl
}

// kill SIGKILLs pod i.
func (f *fleet) kill(i int) {
	if err := f.procs[i].Signal(syscall.SIGKILL); err != nil {
		f.t.Fatal(err)
	}
}
