package crosspod_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/herdguard/herdguard/internal/podproc"
	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/rkey"
)

const (
	// readyBound bounds a fleet's start-up: building a pipeline takes
	// milliseconds, so only a broken pod exceeds it.
	readyBound = time.Minute
	// exitBound is how long a pod may take to exit when told to.
	exitBound = 10 * time.Second
)

// target is where the pods' Redis is: a server address, sentinels, or
// cluster nodes.
type target struct {
	Addr     string
	Sentinel []string
	Cluster  []string
}

// podSpec configures one pod; zero fields take the library's defaults.
type podSpec struct {
	Lock        lockConfig
	OpTimeout   time.Duration
	BreakerOpen time.Duration
	LoadTimeout time.Duration
	TTL, Stale  time.Duration // see podConfig
	// Proxy puts a redistest.Proxy of its own between the pod and
	// target.Addr, so that the test can cut this pod's link alone.
	Proxy bool
	Quiet bool // see podConfig
}

// fleet is a set of pods, each a child process running one pipeline on the
// same Redis namespace. Its methods are called from the test goroutine;
// one reader goroutine per pod records the pod's events.
type fleet struct {
	t    *testing.T
	name string // the pipelines' name, a fresh Redis namespace

	mu      sync.Mutex    // guards the fields below and every podProc's state
	changed chan struct{} // closed and replaced on every event
	pods    []*podProc
	loads   []loadEvent // every load begun, in the order the parent heard of them
	others  []event     // events of the write ops (writes_test.go), in order
	nextID  int
}

// podProc is the parent's handle on one pod.
type podProc struct {
	i     int
	proc  *podproc.Proc
	proxy *redistest.Proxy // nil unless podSpec.Proxy

	// Guarded by fleet.mu.
	ready    bool
	results  map[int][]callResult // by call id
	scripts  []scriptEvent
	breakers []string // "name:from>to"
	dones    map[int]string
	batches  map[int]event // getmany's summaries, by call id
}

// loadEvent is one loader call, as its pod announced it.
type loadEvent struct {
	Index int // position in fleet.loads
	Pod   int
	Key   string
	Value string
	At    time.Time // when the parent heard of it
}

// callResult is one caller's outcome.
type callResult struct {
	Pod        int
	Key        string
	Value      string
	Source     string
	FailedOpen bool
	Err        string
	Latency    time.Duration
	From, At   time.Time // when the call began and returned, in the pod
}

// scriptEvent is one Lua script a pod's client ran.
type scriptEvent struct {
	Index int // position in the pod's scripts
	Key   string
	Cmd   string
	Err   string
	At    time.Time
}

// startFleet starts one pod per spec against tgt, all with pipeline name
// name, and waits until each is ready. The fleet's cleanup stops them.
func startFleet(t *testing.T, name string, tgt target, specs ...podSpec) *fleet {
	t.Helper()
	f := &fleet{t: t, name: name, changed: make(chan struct{})}
	t.Cleanup(f.stop)
	for i, s := range specs {
		cfg := podConfig{Pod: i, Name: name, Addr: tgt.Addr, Sentinel: tgt.Sentinel, Cluster: tgt.Cluster,
			Lock: s.Lock, OpTimeout: s.OpTimeout, BreakerOpen: s.BreakerOpen, LoadTimeout: s.LoadTimeout,
			TTL: s.TTL, Stale: s.Stale, Quiet: s.Quiet}
		var proxy *redistest.Proxy
		if s.Proxy {
			proxy = redistest.StartProxy(t, tgt.Addr)
			cfg.Addr = proxy.Addr()
		}
		p, err := f.spawn(cfg)
		if err != nil {
			t.Fatal(err)
		}
		p.proxy = proxy
	}
	allReady := func() bool {
		for _, p := range f.pods {
			if !p.ready || p.exited() {
				return false
			}
		}
		return true
	}
	f.waitFor(readyBound, func() bool {
		for _, p := range f.pods {
			if p.exited() {
				return true // no point waiting for the others
			}
		}
		return allReady()
	})
	f.mu.Lock()
	ok := allReady()
	f.mu.Unlock()
	if !ok {
		t.Fatalf("pods not ready within %v, or one exited:\n%s", readyBound, f.stderrs())
	}
	return f
}

func (f *fleet) spawn(cfg podConfig) (*podProc, error) {
	env, err := podproc.JSONEnv(podEnv, cfg)
	if err != nil {
		return nil, err
	}
	p := &podProc{i: cfg.Pod, results: map[int][]callResult{}, dones: map[int]string{}}
	// The pod's reader records its events, and wakes the waiters when
	// it exits.
	p.proc, err = podproc.StartProc(podproc.Spec{
		Name: fmt.Sprintf("pod %d", cfg.Pod), Env: []string{env},
		OnLine: func(line []byte) {
			var ev event
			if json.Unmarshal(line, &ev) == nil {
				f.record(p, ev)
			}
		},
		OnExit: func() {
			f.mu.Lock()
			f.notifyLocked()
			f.mu.Unlock()
		},
	})
	if err != nil {
		return nil, fmt.Errorf("crosspod: start pod %d: %w", cfg.Pod, err)
	}
	f.mu.Lock()
	f.pods = append(f.pods, p)
	f.mu.Unlock()
	return p, nil
}

func (f *fleet) record(p *podProc, ev event) {
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	switch ev.Ev {
	case "ready":
		p.ready = true
	case "load":
		f.loads = append(f.loads, loadEvent{Index: len(f.loads), Pod: p.i, Key: ev.Key, Value: ev.Value, At: now})
	case "result":
		p.results[ev.ID] = append(p.results[ev.ID], callResult{Pod: p.i, Key: ev.Key, Value: ev.Value, Source: ev.Source,
			FailedOpen: ev.FailedOpen, Err: ev.Err, Latency: time.Duration(ev.LatencyUS) * time.Microsecond,
			From: time.Unix(0, ev.FromNS), At: time.Unix(0, ev.AtNS)})
	case "script":
		p.scripts = append(p.scripts, scriptEvent{Index: len(p.scripts), Key: ev.Key, Cmd: ev.Cmd, Err: ev.Err, At: now})
	case "breaker":
		p.breakers = append(p.breakers, ev.Cmd+":"+ev.Value)
	case "done":
		p.dones[ev.ID] = ev.Err
	case "batch":
		if p.batches == nil {
			p.batches = map[int]event{}
		}
		p.batches[ev.ID] = ev
	default:
		f.others = append(f.others, ev)
	}
	f.notifyLocked()
}

func (f *fleet) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// exited reports whether the pod's process has ended.
func (p *podProc) exited() bool { return p.proc.Exited() }

// waitFor waits up to d until cond, called with f.mu held, holds.
func (f *fleet) waitFor(d time.Duration, cond func() bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		f.mu.Lock()
		ok := cond()
		ch := f.changed
		f.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-t.C:
			f.mu.Lock()
			defer f.mu.Unlock()
			return cond()
		}
	}
}

// keys is the Redis key space of the fleet's pipelines.
func (f *fleet) keys() rkey.Space {
	ks, err := rkey.New("", f.name)
	if err != nil {
		f.t.Fatal(err)
	}
	return ks
}

// stop tells every pod to exit, kills those that do not within exitBound,
// and on failure logs each pod's stderr.
func (f *fleet) stop() {
	f.mu.Lock()
	pods := append([]*podProc(nil), f.pods...)
	f.mu.Unlock()
	for _, p := range pods {
		_ = p.proc.SendJSON(command{Op: "exit"})
		_ = p.proc.CloseStdin()
	}
	deadline := time.Now().Add(exitBound)
	for _, p := range pods {
		err := p.proc.Close(time.Until(deadline))
		switch {
		case errors.Is(err, podproc.ErrNotExited):
			f.t.Errorf("pod %d did not exit within %v of being told to", p.i, exitBound)
		case err != nil:
			f.t.Errorf("pod %d: %v", p.i, err)
		}
	}
	if out := f.stderrs(); f.t.Failed() && out != "" {
		f.t.Logf("pods' stderr:\n%s", out)
	}
}

func (f *fleet) stderrs() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := ""
	for _, p := range f.pods {
		if out := p.proc.Stderr(); out != "" || p.proc.Err() != nil {
			s += fmt.Sprintf("--- pod %d (exit: %v) ---\n%s\n", p.i, p.proc.Err(), out)
		}
	}
	return s
}
