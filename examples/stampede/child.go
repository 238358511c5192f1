package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/resilience"
)

// podEnv carries a pod's configuration, as JSON, from the parent to the
// child process it starts.
const podEnv = "HERDGUARD_STAMPEDE_POD"

// Modes.
const (
	modePipeline = "pipeline" // the toolkit's pipeline: single-flight, lock, announcement
	modePoll     = "poll"     // cachekit style: every caller polls SET NX every 100 ms
)

// podConfig is what one pod (child process) needs to know.
type podConfig struct {
	Pod       int           `json:"pod"`
	Mode      string        `json:"mode"`
	Addr      string        `json:"addr"`
	Name      string        `json:"name"` // pipeline name: the Redis namespace of the run
	Callers   int           `json:"callers"`
	Load      time.Duration `json:"load"`
	Lock      lockSettings  `json:"lock"`
	OpTimeout time.Duration `json:"op_timeout"` // Redis operation timeout; 0 = library default
	// CallTimeout bounds each caller's call.
	CallTimeout time.Duration `json:"call_timeout"`
}

type lockSettings struct {
	Lease   time.Duration `json:"lease"`
	Wait    time.Duration `json:"wait"`
	MaxWait time.Duration `json:"max_wait"`
	Poll    time.Duration `json:"poll"`
}

// command is a parent -> child message (one JSON line on the child's stdin).
type command struct {
	Op    string        `json:"op"` // "round" or "exit"
	Key   string        `json:"key,omitempty"`
	Start int64         `json:"start,omitempty"` // unix nanoseconds: when the callers go
	Load  time.Duration `json:"load,omitempty"`  // overrides the pod's loader time; 0 = pod's
}

// event is a child -> parent message (one JSON line on the child's stdout).
type event struct {
	Ev     string     `json:"ev"` // "ready", "load" (a loader call began), "result"
	Pod    int        `json:"pod"`
	Key    string     `json:"key,omitempty"`
	Result *podResult `json:"result,omitempty"`
}

// podResult is one pod's account of one round.
type podResult struct {
	Callers    int            `json:"callers"`
	LatencyUS  []int64        `json:"latency_us"` // one per caller
	Errors     int            `json:"errors"`
	FailOpen   int            `json:"fail_open"`
	Sources    map[string]int `json:"sources"`
	Values     map[string]int `json:"values"`      // value -> callers that got it
	RoundTrips int64          `json:"round_trips"` // commands this pod's client sent
	ErrSample  string         `json:"err_sample,omitempty"`

	key string // the round's key, set by the parent's reader
}

// countHook counts the commands a client sends (round trips, pipelined
// commands each).
type countHook struct{ n atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// emitter writes events, one JSON line each, from many goroutines.
type emitter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (e *emitter) emit(ev event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	_ = e.enc.Encode(ev) // a parent gone away: nothing to tell
}

// getter is one caller's call in a mode.
type getter func(ctx context.Context, key string, load time.Duration) (value, source string, failOpen bool, err error)

// runPod is a child process's main: it builds its client and pipeline,
// says ready, then runs the rounds it is told to until told to exit or its
// stdin closes.
func runPod(cfg podConfig, in io.Reader, out io.Writer) error {
	em := &emitter{enc: json.NewEncoder(out)}
	hook := &countHook{}
	client := redis.NewClient(&redis.Options{Addr: cfg.Addr})
	defer client.Close()
	client.AddHook(hook)

	var get getter
	var closePipeline func() error
	switch cfg.Mode {
	case modePipeline:
		p, err := buildPipeline(cfg, client)
		if err != nil {
			return err
		}
		closePipeline = p.Close
		get = func(ctx context.Context, key string, d time.Duration) (string, string, bool, error) {
			r, err := p.GetResult(ctx, key, podLoader(cfg, em, d))
			return r.Value, r.Source.String(), r.FailedOpen, err
		}
	case modePoll:
		pl := &pollLock{client: client, lease: cfg.Lock.Lease, wait: cfg.Lock.Wait, prefix: "stampede:" + cfg.Name + ":"}
		get = func(ctx context.Context, key string, d time.Duration) (string, string, bool, error) {
			return pl.get(ctx, key, podLoader(cfg, em, d))
		}
	default:
		return fmt.Errorf("stampede: unknown mode %q", cfg.Mode)
	}
	defer func() {
		if closePipeline != nil {
			_ = closePipeline()
		}
	}()
	em.emit(event{Ev: "ready", Pod: cfg.Pod})

	sc := bufio.NewScanner(in)
	for sc.Scan() {
		var c command
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return fmt.Errorf("stampede: pod %d: bad command %q: %w", cfg.Pod, sc.Text(), err)
		}
		switch c.Op {
		case "exit":
			return nil
		case "round":
			before := hook.n.Load()
			r := runRound(cfg, get, c)
			r.RoundTrips = hook.n.Load() - before
			em.emit(event{Ev: "result", Pod: cfg.Pod, Key: c.Key, Result: r})
		default:
			return fmt.Errorf("stampede: pod %d: unknown op %q", cfg.Pod, c.Op)
		}
	}
	return sc.Err() // stdin closed: the parent is gone
}

func buildPipeline(cfg podConfig, client redis.UniversalClient) (*resilience.Pipeline[string], error) {
	timeout := max(resilience.DefaultTimeout, 2*cfg.Load)
	return resilience.New[string](cfg.Name).
		Cache(time.Minute).
		Redis(client).
		RedisOptions(resilience.RedisOptions{OpTimeout: cfg.OpTimeout}).
		Lock(resilience.LockSettings{Lease: cfg.Lock.Lease, Wait: cfg.Lock.Wait, MaxWait: cfg.Lock.MaxWait, Poll: cfg.Lock.Poll}).
		Timeout(timeout).
		FlightTimeout(max(resilience.DefaultFlightTimeout, 2*timeout)).
		Build()
}

// podLoader is the expensive call: it reports its start to the parent at
// once (so that loads are counted even if this process dies mid-load),
// sleeps d (or the pod's load time), and returns a value naming the key
// and the pod.
func podLoader(cfg podConfig, em *emitter, d time.Duration) resilience.LoadFunc[string] {
	if d == 0 {
		d = cfg.Load
	}
	return func(ctx context.Context, key string) (string, error) {
		em.emit(event{Ev: "load", Pod: cfg.Pod, Key: key})
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return fmt.Sprintf("%s@pod%d", key, cfg.Pod), nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// runRound runs the pod's callers for one key, all at c.Start.
func runRound(cfg podConfig, get getter, c command) *podResult {
	n := cfg.Callers
	lat := make([]int64, n)
	type outcome struct {
		value, source string
		failOpen      bool
		err           error
	}
	outs := make([]outcome, n)
	start := time.Unix(0, c.Start)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-gate
			callTimeout := cfg.CallTimeout
			if callTimeout <= 0 {
				callTimeout = time.Minute
			}
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			defer cancel()
			t0 := time.Now()
			v, src, fo, err := get(ctx, c.Key, c.Load)
			lat[i] = time.Since(t0).Microseconds()
			outs[i] = outcome{v, src, fo, err}
		})
	}
	time.Sleep(time.Until(start))
	close(gate)
	wg.Wait()
	r := &podResult{Callers: n, LatencyUS: lat, Sources: map[string]int{}, Values: map[string]int{}}
	for _, o := range outs {
		if o.err != nil {
			r.Errors++
			if r.ErrSample == "" {
				r.ErrSample = o.err.Error()
			}
		} else {
			r.Values[o.value]++
		}
		if o.failOpen {
			r.FailOpen++
		}
		r.Sources[o.source]++
	}
	return r
}

// pollLock is the comparison: the distributed lock as cachekit and many
// others do it. Every caller (no single-flight) reads the value; on a miss
// it tries SET NX PX; the winner loads, writes and deletes the lock; the
// others retry every 100 ms, reading the value each time, and after the
// wait budget load on their own. A Redis error fails open.
type pollLock struct {
	client      *redis.Client
	lease, wait time.Duration
	prefix      string
}

const pollInterval = 100 * time.Millisecond

var releaseScript = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func (l *pollLock) get(ctx context.Context, key string, load resilience.LoadFunc[string]) (string, string, bool, error) {
	vkey, lkey := l.prefix+key, l.prefix+key+":lock"
	lease, wait := l.lease, l.wait
	if lease <= 0 {
		lease = resilience.DefaultLockLease
	}
	if wait <= 0 {
		wait = resilience.DefaultLockWait
	}
	loadAndSet := func(src string, failOpen bool) (string, string, bool, error) {
		v, err := load(ctx, key)
		if err != nil {
			return "", src, failOpen, err
		}
		if err := l.client.Set(ctx, vkey, v, time.Minute).Err(); err != nil {
			failOpen = true
		}
		return v, src, failOpen, nil
	}
	v, err := l.client.Get(ctx, vkey).Result()
	switch {
	case err == nil:
		return v, "l2", false, nil
	case !errors.Is(err, redis.Nil):
		if ctx.Err() != nil {
			return "", "none", false, ctx.Err()
		}
		return loadAndSet("loader", true)
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	deadline := time.Now().Add(wait)
	for {
		ok, err := l.client.SetNX(ctx, lkey, tok, lease).Result()
		if err != nil {
			if ctx.Err() != nil {
				return "", "none", false, ctx.Err()
			}
			return loadAndSet("loader", true)
		}
		if ok {
			v, src, fo, err := loadAndSet("loader", false)
			_ = releaseScript.Run(context.WithoutCancel(ctx), l.client, []string{lkey}, tok).Err()
			return v, src, fo, err
		}
		t := time.NewTimer(pollInterval)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return "", "none", false, ctx.Err()
		}
		v, err := l.client.Get(ctx, vkey).Result()
		switch {
		case err == nil:
			return v, "waited", false, nil
		case !errors.Is(err, redis.Nil):
			if ctx.Err() != nil {
				return "", "none", false, ctx.Err()
			}
			return loadAndSet("loader", true)
		}
		if time.Now().After(deadline) {
			return loadAndSet("loader", false) // wait budget spent: load unlocked
		}
	}
}

// childMain runs this process as a pod, configured from the environment.
func childMain() int {
	var cfg podConfig
	if err := json.Unmarshal([]byte(os.Getenv(podEnv)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "stampede: pod: bad %s: %v\n", podEnv, err)
		return 2
	}
	if err := runPod(cfg, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
