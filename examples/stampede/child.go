package main

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
	"golang.org/x/sync/singleflight"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/examples/internal/otelsetup"
	"github.com/herdguard/herdguard/internal/podproc"
	"github.com/herdguard/herdguard/resilience"
)

// podEnv carries a pod's configuration, as JSON, from the parent to the
// child process it starts.
const podEnv = "HERDGUARD_STAMPEDE_POD"

// Modes.
const (
	modePipeline  = "pipeline"     // the toolkit's pipeline: single-flight, lock, announcement
	modePoll      = "poll"         // cachekit style: every caller polls SET NX every 100 ms
	modeGocache   = "gocache"      // go-redis/cache Once: single-flight per process, no lock
	modeRedislock = "redislock"    // single-flight per process, then a bsm/redislock lock
	modeLocal     = "singleflight" // single-flight per process and nothing else: no Redis, each process loads
)

// allModes lists the modes in the order the usage text gives them.
var allModes = []string{modePipeline, modePoll, modeGocache, modeRedislock, modeLocal}

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
	// GocacheLocal turns on go-redis/cache's local TinyLFU cache.
	GocacheLocal bool `json:"gocache_local"`
	// CallTimeout bounds each caller's call.
	CallTimeout time.Duration `json:"call_timeout"`
}

type lockSettings struct {
	Lease   time.Duration `json:"lease"`
	MaxWait time.Duration `json:"max_wait"`
	Poll    time.Duration `json:"poll"`
}

// command is a parent -> child message (one JSON line on the child's stdin).
type command struct {
	Op    string        `json:"op"` // "round" or "exit"
	Key   string        `json:"key,omitempty"`
	Keys  int           `json:"keys,omitempty"`  // if not 0, a burst: the keys Key-0 .. Key-(Keys-1)
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
	RoundTrips int64          `json:"round_trips"` // round trips this pod's client made
	Loads      int            `json:"loads"`       // loader calls this pod began in the round
	// BreakerWasOpen says the pod's Redis breaker was not closed at the
	// round's start; BreakerOpened, that it opened during the round.
	BreakerWasOpen bool   `json:"breaker_was_open,omitempty"`
	BreakerOpened  bool   `json:"breaker_opened,omitempty"`
	ErrSample      string `json:"err_sample,omitempty"`

	key string // the round's key, set by the parent's reader
}

// roundKeys returns the keys of a round: key itself, or for a burst of n
// keys, key-0 .. key-(n-1).
func roundKeys(key string, n int) []string {
	if n <= 0 {
		return []string{key}
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%d", key, i)
	}
	return keys
}

// countHook counts a client's round trips: each command, and each pipeline
// as one.
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
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// emitter writes events, one JSON line each, from many goroutines, and
// counts the loader calls it reports.
type emitter struct {
	*podproc.Writer
	loads atomic.Int64
}

// load reports a loader call that begins.
func (e *emitter) load(pod int, key string) {
	e.loads.Add(1)
	e.Emit(event{Ev: "load", Pod: pod, Key: key})
}

// breakerWatch follows a pipeline's Redis breaker.
type breakerWatch struct {
	state atomic.Int32 // the last state it moved to, a breaker.State
	opens atomic.Int64 // moves to open so far
}

// redisBreakerName is the name the pipeline gives its Redis breaker.
const redisBreakerName = "redis"

// observe is the pipeline's OnBreakerChange.
func (w *breakerWatch) observe(name string, _, to breaker.State) {
	if name != redisBreakerName {
		return
	}
	w.state.Store(int32(to))
	if to == breaker.Open {
		w.opens.Add(1)
	}
}

// getter is one caller's call in a mode.
type getter func(ctx context.Context, key string, load time.Duration) (value, source string, failOpen bool, err error)

// runPod is a child process's main: it builds its client and its mode's
// getter, says ready, then runs the rounds it is told to until told to exit
// or its stdin closes.
func runPod(cfg podConfig, in io.Reader, out io.Writer) error {
	em := &emitter{Writer: podproc.NewWriter(out)}
	hook := &countHook{}
	client := redis.NewClient(&redis.Options{Addr: cfg.Addr})
	defer client.Close()
	client.AddHook(hook)
	if err := otelsetup.Redis(client); err != nil {
		return err
	}
	watch := &breakerWatch{}
	get, closeGet, err := modeGetter(cfg, client, em, watch)
	if err != nil {
		return err
	}
	defer func() { _ = closeGet() }()
	em.Emit(event{Ev: "ready", Pod: cfg.Pod})

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
			trips, loads := hook.n.Load(), em.loads.Load()
			wasOpen, opens := breaker.State(watch.state.Load()) != breaker.Closed, watch.opens.Load()
			r := runRound(cfg, get, c)
			r.RoundTrips = hook.n.Load() - trips
			r.Loads = int(em.loads.Load() - loads)
			r.BreakerWasOpen, r.BreakerOpened = wasOpen, watch.opens.Load() > opens
			em.Emit(event{Ev: "result", Pod: cfg.Pod, Key: c.Key, Result: r})
		default:
			return fmt.Errorf("stampede: pod %d: unknown op %q", cfg.Pod, c.Op)
		}
	}
	return sc.Err() // stdin closed: the parent is gone
}

// modeGetter returns the call of cfg.Mode on client, and what closes it.
func modeGetter(cfg podConfig, client *redis.Client, em *emitter, watch *breakerWatch) (getter, func() error, error) {
	noClose := func() error { return nil }
	switch cfg.Mode {
	case modePipeline:
		p, err := buildPipeline(cfg, client, watch)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context, key string, d time.Duration) (string, string, bool, error) {
			r, err := p.GetResult(ctx, key, podLoader(cfg, em, d))
			return r.Value, r.Source.String(), r.FailedOpen, err
		}, p.Close, nil
	case modePoll:
		pl := &pollLock{client: client, lease: cfg.Lock.Lease, prefix: peerPrefix(cfg.Name)}
		return func(ctx context.Context, key string, d time.Duration) (string, string, bool, error) {
			return pl.get(ctx, key, podLoader(cfg, em, d))
		}, noClose, nil
	case modeGocache:
		gc := newGocachePeer(client, peerPrefix(cfg.Name), cfg.GocacheLocal)
		return func(ctx context.Context, key string, d time.Duration) (string, string, bool, error) {
			return gc.get(ctx, key, podLoader(cfg, em, d))
		}, noClose, nil
	case modeLocal:
		var g singleflight.Group
		return func(ctx context.Context, key string, d time.Duration) (string, string, bool, error) {
			v, err, shared := g.Do(key, func() (any, error) { return podLoader(cfg, em, d)(ctx, key) })
			src := "loader"
			if shared {
				src = "coalesced"
			}
			s, _ := v.(string)
			return s, src, false, err
		}, noClose, nil
	case modeRedislock:
		rl := newLockRecipe(client, peerPrefix(cfg.Name), cfg.Lock)
		return func(ctx context.Context, key string, d time.Duration) (string, string, bool, error) {
			return rl.get(ctx, key, podLoader(cfg, em, d))
		}, noClose, nil
	}
	return nil, nil, fmt.Errorf("stampede: unknown mode %q", cfg.Mode)
}

func buildPipeline(cfg podConfig, client redis.UniversalClient, watch *breakerWatch) (*resilience.Pipeline[string], error) {
	timeout := max(resilience.DefaultTimeout, 2*cfg.Load)
	return resilience.New[string](cfg.Name).
		Cache(time.Minute).
		Redis(client).
		RedisOptions(resilience.RedisOptions{OpTimeout: cfg.OpTimeout}).
		Lock(resilience.LockSettings{Lease: cfg.Lock.Lease, MaxWait: cfg.Lock.MaxWait, Poll: cfg.Lock.Poll}).
		Timeout(timeout).
		FlightTimeout(max(resilience.DefaultFlightTimeout, 2*timeout)).
		OnBreakerChange(watch.observe).
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
		em.load(cfg.Pod, key)
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

// runRound runs the pod's callers, cfg.Callers for each of the round's
// keys, all at c.Start.
func runRound(cfg podConfig, get getter, c command) *podResult {
	keys := roundKeys(c.Key, c.Keys)
	n := len(keys) * cfg.Callers
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
			v, src, fo, err := get(ctx, keys[i%len(keys)], c.Load)
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

// childMain runs this process as a pod, configured from the environment.
func childMain() int {
	var cfg podConfig
	if err := json.Unmarshal([]byte(os.Getenv(podEnv)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "stampede: pod: bad %s: %v\n", podEnv, err)
		return 2
	}
	// With OTEL_EXPORTER_OTLP_ENDPOINT set, each pod exports its traces
	// and metrics as a service of its own: OTEL_SERVICE_NAME (default
	// "stampede") and "-pod-N".
	shutdown, err := otelsetup.Install(context.Background(), podService(cfg.Pod))
	if err != nil {
		fmt.Fprintln(os.Stderr, "stampede: pod: OTLP:", err)
		return 1
	}
	code := 0
	if err := runPod(cfg, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "stampede: pod: OTLP shutdown:", err)
	}
	return code
}

// podService names pod i's service for OTLP, and sets OTEL_SERVICE_NAME
// to it, so that it wins over the name the pods inherit.
func podService(i int) string {
	base := os.Getenv("OTEL_SERVICE_NAME")
	if base == "" {
		base = "stampede"
	}
	name := fmt.Sprintf("%s-pod-%d", base, i)
	_ = os.Setenv("OTEL_SERVICE_NAME", name)
	return name
}
