package crosspod_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/internal/podproc"
	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/resilience"
)

// podEnv carries a pod's configuration, as JSON, from the parent to the
// child process it starts.
const podEnv = "HERDGUARD_CROSSPOD_POD"

const (
	// callTimeout bounds each caller's call in a pod.
	callTimeout = 3 * time.Minute
	// holdCap bounds a held load whose finish never comes.
	holdCap = 3 * time.Minute
	// exitGrace bounds how long an exiting pod waits for its calls.
	exitGrace = 10 * time.Second
)

// podConfig is what one pod needs to know.
type podConfig struct {
	Pod  int    `json:"pod"`
	Name string `json:"name"` // the pipeline's name: the test's Redis namespace
	// One of: a server (or proxy) address, sentinel addresses, cluster
	// node addresses.
	Addr     string   `json:"addr,omitempty"`
	Sentinel []string `json:"sentinel,omitempty"`
	Cluster  []string `json:"cluster,omitempty"`

	Lock lockConfig `json:"lock"`
	// Zero values take the library's defaults.
	OpTimeout   time.Duration `json:"op_timeout,omitempty"`   // Redis operation timeout
	BreakerOpen time.Duration `json:"breaker_open,omitempty"` // Redis breaker's open time
	LoadTimeout time.Duration `json:"load_timeout,omitempty"` // loader attempt timeout
	// TTL is the Cache ttl (default a minute); Stale, if set, keeps
	// values for that grace past it and serves them stale-while-
	// revalidate.
	TTL   time.Duration `json:"ttl,omitempty"`
	Stale time.Duration `json:"stale,omitempty"`
	// Quiet leaves out the script events, which the pod writes inside
	// each round trip: for batches of many thousands of keys.
	Quiet bool `json:"quiet,omitempty"`
}

// command is a parent -> pod message, one JSON line on the pod's stdin.
type command struct {
	Op      string        `json:"op"` // "get", "finish", "invalidate", "exit"
	ID      int           `json:"id,omitempty"`
	Key     string        `json:"key,omitempty"`
	Callers int           `json:"callers,omitempty"`
	Sleep   time.Duration `json:"sleep,omitempty"` // how long a load takes
	Hold    bool          `json:"hold,omitempty"`  // a load waits for "finish" instead
	// The write ops ("set", "inval", "watch", "peek"; see writes_pod_test.go).
	Value  string   `json:"value,omitempty"`
	Keys   []string `json:"keys,omitempty"` // and getmany: the batch's keys
	Values []string `json:"values,omitempty"`
}

// event is a pod -> parent message, one JSON line on the pod's stdout.
type event struct {
	Ev  string `json:"ev"` // "ready", "load", "result", "script", "breaker", "done"
	Pod int    `json:"pod"`
	ID  int    `json:"id,omitempty"`
	Key string `json:"key,omitempty"`
	// load: the value the load returns; result: the value the caller got;
	// breaker: "from>to".
	Value      string `json:"value,omitempty"`
	Source     string `json:"source,omitempty"`
	FailedOpen bool   `json:"failed_open,omitempty"`
	Err        string `json:"err,omitempty"`
	LatencyUS  int64  `json:"latency_us,omitempty"`
	Cmd        string `json:"cmd,omitempty"`   // script: the command; breaker: its name
	AtNS       int64  `json:"at_ns,omitempty"` // write ops and results: when, in Unix nanoseconds
	// FromNS is when a write op's call ("written") or a caller's Get
	// ("result") began, in Unix nanoseconds.
	FromNS int64 `json:"from_ns,omitempty"`
	// Dups is the pipeline's Stats().DuplicateLoads ("stats").
	Dups uint64 `json:"dups,omitempty"`
}

// podMain runs this process as a pod configured by cfg (JSON).
func podMain(cfg string) int {
	var c podConfig
	if err := json.Unmarshal([]byte(cfg), &c); err != nil {
		fmt.Fprintf(os.Stderr, "crosspod: pod: bad %s: %v\n", podEnv, err)
		return 2
	}
	if err := runPod(c, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "crosspod: pod %d: %v\n", c.Pod, err)
		return 1
	}
	return 0
}

// pod is a running pod: its pipeline, its held loads, its calls.
type pod struct {
	cfg   podConfig
	em    *podproc.Writer
	pipe  *resilience.Pipeline[string]
	holds holds
	seq   atomic.Int64
	calls sync.WaitGroup
	// ctx ends the calls when the pod exits.
	ctx context.Context
}

// newClient builds the pod's client as the project recommends: with
// ContextTimeoutEnabled, so that the pipeline's per-operation timeout
// reaches the socket.
func newClient(cfg podConfig) redis.UniversalClient {
	switch {
	case len(cfg.Sentinel) > 0:
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.MasterName,
			SentinelAddrs: cfg.Sentinel, ContextTimeoutEnabled: true})
	case len(cfg.Cluster) > 0:
		// go-redis's default ClusterStateReloadInterval (a minute): the
		// pipeline makes the client reload its slot map when a master
		// stops answering.
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.Cluster, ContextTimeoutEnabled: true})
	}
	return redis.NewClient(&redis.Options{Addr: cfg.Addr, ContextTimeoutEnabled: true})
}

// runPod builds the pod's client and pipeline, says ready, and serves
// commands until told to exit or its stdin closes.
func runPod(cfg podConfig, in io.Reader, out io.Writer) error {
	em := podproc.NewWriter(out)
	client := newClient(cfg)
	defer client.Close()
	if !cfg.Quiet {
		client.AddHook(&scriptHook{em: em, pod: cfg.Pod})
	}
	client.AddHook(podTrips)

	// These tests are about the lock, not about Redis timeouts: unless a
	// test sets one, a generous operation timeout keeps a loaded
	// machine's scheduling delays from reading as Redis failures.
	if cfg.OpTimeout == 0 {
		cfg.OpTimeout = 2 * time.Second
	}
	ttl := cfg.TTL
	if ttl == 0 {
		ttl = time.Minute
	}
	b := resilience.New[string](cfg.Name).
		Cache(ttl).
		Redis(client).
		RedisOptions(resilience.RedisOptions{OpTimeout: cfg.OpTimeout, Breaker: breaker.Settings{OpenTimeout: cfg.BreakerOpen}}).
		Lock(cfg.Lock.settings()).
		OnBreakerChange(func(name string, from, to breaker.State) {
			em.Emit(event{Ev: "breaker", Pod: cfg.Pod, Cmd: name, Value: from.String() + ">" + to.String()})
		})
	if cfg.LoadTimeout > 0 {
		b = b.Timeout(cfg.LoadTimeout).FlightTimeout(callTimeout)
	}
	if cfg.Stale > 0 {
		b = b.Jitter(0).Stale(cfg.Stale).StaleWhileRevalidate()
	}
	pipe, err := b.Build()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &pod{cfg: cfg, em: em, pipe: pipe, ctx: ctx}
	defer func() {
		p.holds.finishAll()
		cancel()
		p.waitCalls()
		_ = pipe.Close()
	}()
	em.Emit(event{Ev: "ready", Pod: cfg.Pod})

	sc := bufio.NewScanner(in)
	for sc.Scan() {
		var c command
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return fmt.Errorf("bad command %q: %w", sc.Text(), err)
		}
		switch c.Op {
		case "exit":
			return nil
		case "get":
			p.get(c)
		case "getmany":
			p.getMany(c)
		case "bigmany":
			p.bigMany(c)
		case "finish":
			p.holds.finish(c.Key)
		case "invalidate":
			p.invalidate(c)
		default:
			if !p.writeOp(c) {
				return fmt.Errorf("unknown op %q", c.Op)
			}
		}
	}
	return sc.Err() // stdin closed: the parent is gone
}

// get starts c.Callers concurrent calls for c.Key; each reports its own
// result.
func (p *pod) get(c command) {
	load := p.loader(c)
	for range max(c.Callers, 1) {
		p.calls.Go(func() {
			ctx, cancel := context.WithTimeout(p.ctx, callTimeout)
			defer cancel()
			t0 := time.Now()
			r, err := p.pipe.GetResult(ctx, c.Key, load)
			t1 := time.Now()
			ev := event{Ev: "result", Pod: p.cfg.Pod, ID: c.ID, Key: c.Key, Value: r.Value,
				Source: r.Source.String(), FailedOpen: r.FailedOpen, LatencyUS: t1.Sub(t0).Microseconds(),
				FromNS: t0.UnixNano(), AtNS: t1.UnixNano()}
			if err != nil {
				ev.Err = err.Error()
			}
			p.em.Emit(ev)
		})
	}
}

// loader is the expensive call: it tells the parent at once that it began
// (so a load counts even if the pod dies mid-load), then takes c.Sleep or
// waits for the parent's finish, and returns a value naming the key, the
// pod, the load's sequence in the pod and its start time.
func (p *pod) loader(c command) resilience.LoadFunc[string] {
	return func(ctx context.Context, key string) (string, error) {
		start := time.Now()
		v := formatValue(key, p.cfg.Pod, p.seq.Add(1), start)
		p.em.Emit(event{Ev: "load", Pod: p.cfg.Pod, Key: key, Value: v})
		if c.Hold {
			if err := p.holds.wait(ctx, key); err != nil {
				return "", err
			}
			return v, nil
		}
		t := time.NewTimer(c.Sleep)
		defer t.Stop()
		select {
		case <-t.C:
			return v, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

func (p *pod) invalidate(c command) {
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	ev := event{Ev: "done", Pod: p.cfg.Pod, ID: c.ID, Key: c.Key}
	if err := p.pipe.Invalidate(ctx, c.Key); err != nil {
		ev.Err = err.Error()
	}
	p.em.Emit(ev)
}

// waitCalls waits for the calls in flight, at most exitGrace.
func (p *pod) waitCalls() {
	done := make(chan struct{})
	go func() {
		p.calls.Wait()
		close(done)
	}()
	t := time.NewTimer(exitGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
