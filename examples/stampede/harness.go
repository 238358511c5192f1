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
	"math"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/resilience"
)

// Spawner returns the command that runs one pod: this program (or a test
// binary) in its child mode. The fleet adds the pod's configuration to the
// command's environment and wires its stdin and stdout.
type Spawner func() *exec.Cmd

// selfSpawner re-executes this binary with the hidden -child flag.
func selfSpawner() (Spawner, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return func() *exec.Cmd { return exec.Command(exe, "-child") }, nil
}

// Fleet is a set of pods: child processes each running one pipeline (or the
// polling lock) against the same Redis.
type Fleet struct {
	pods []*pod

	mu     sync.Mutex // guards loads
	loads  map[string]int
	loaded chan struct{} // closed and replaced on each load event
}

type pod struct {
	i       int
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	results chan *podResult
	loads   chan string   // keys this pod's loader started on
	done    chan struct{} // closed when the pod's stdout has ended and it is reaped
	err     error         // the pod's exit status; read after done
	killed  bool
}

// StartFleet starts one pod per config and waits until each is ready.
func StartFleet(ctx context.Context, spawn Spawner, cfgs []podConfig) (*Fleet, error) {
	f := &Fleet{loads: map[string]int{}, loaded: make(chan struct{})}
	for _, c := range cfgs {
		p, err := f.spawn(spawn, c)
		if err != nil {
			_ = f.Close()
			return nil, err
		}
		f.pods = append(f.pods, p)
	}
	ready := make(chan error, len(f.pods))
	for _, p := range f.pods {
		go func() {
			select {
			case <-p.results: // the first message is "ready", passed on as nil
				ready <- nil
			case <-p.done:
				ready <- fmt.Errorf("stampede: pod %d exited before it was ready: %v", p.i, p.err)
			case <-ctx.Done():
				ready <- fmt.Errorf("stampede: pod %d not ready: %w", p.i, ctx.Err())
			}
		}()
	}
	var errs []error
	for range f.pods {
		errs = append(errs, <-ready)
	}
	if err := errors.Join(errs...); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

func (f *Fleet) spawn(spawn Spawner, c podConfig) (*pod, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	cmd := spawn()
	cmd.Env = append(os.Environ(), podEnv+"="+string(b))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("stampede: start pod %d: %w", c.Pod, err)
	}
	p := &pod{i: c.Pod, cmd: cmd, stdin: stdin,
		results: make(chan *podResult, 16), loads: make(chan string, 1024), done: make(chan struct{})}
	// The reader ends when the pod's stdout closes (it exited or was
	// killed); then it reaps the pod.
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 64<<20)
		for sc.Scan() {
			var ev event
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				continue
			}
			switch ev.Ev {
			case "ready":
				p.results <- nil
			case "load":
				f.countLoad(ev.Key)
				select {
				case p.loads <- ev.Key:
				default:
				}
			case "result":
				if ev.Result != nil {
					ev.Result.key = ev.Key
					p.results <- ev.Result
				}
			}
		}
		p.err = cmd.Wait()
	}()
	return p, nil
}

func (f *Fleet) countLoad(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loads[key]++
	close(f.loaded)
	f.loaded = make(chan struct{})
}

// Loads returns how many loader calls for key the pods have begun.
func (f *Fleet) Loads(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.loads[key]
}

// Len returns the number of pods.
func (f *Fleet) Len() int { return len(f.pods) }

// Go tells pod i to run a round for key at start; load overrides the pod's
// loader time when not 0.
func (f *Fleet) Go(i int, key string, start time.Time, load time.Duration) error {
	p := f.pods[i]
	b, _ := json.Marshal(command{Op: "round", Key: key, Start: start.UnixNano(), Load: load})
	_, err := p.stdin.Write(append(b, '\n'))
	return err
}

// Result waits up to timeout for pod i's result of its round on key. A pod
// that died or did not answer yields an error. Late results of earlier
// rounds are dropped.
func (f *Fleet) Result(i int, key string, timeout time.Duration) (*podResult, error) {
	p := f.pods[i]
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case r := <-p.results:
			if r != nil && r.key == key {
				return r, nil
			}
		case <-p.done:
			for { // results may have been read just before the end
				select {
				case r := <-p.results:
					if r != nil && r.key == key {
						return r, nil
					}
					continue
				default:
				}
				break
			}
			return nil, fmt.Errorf("stampede: pod %d is gone: %v", i, p.err)
		case <-t.C:
			return nil, fmt.Errorf("stampede: pod %d: no result within %v", i, timeout)
		}
	}
}

// WaitLoad waits up to timeout until pod i's loader has begun on key.
func (f *Fleet) WaitLoad(i int, key string, timeout time.Duration) error {
	p := f.pods[i]
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case k := <-p.loads:
			if k == key {
				return nil
			}
		case <-p.done:
			return fmt.Errorf("stampede: pod %d is gone", i)
		case <-t.C:
			return fmt.Errorf("stampede: pod %d: no load of %q within %v", i, key, timeout)
		}
	}
}

// Signal sends sig to pod i (SIGSTOP, SIGCONT).
func (f *Fleet) Signal(i int, sig syscall.Signal) error {
	return f.pods[i].cmd.Process.Signal(sig)
}

// Kill ends pod i with SIGKILL and waits until it is reaped.
func (f *Fleet) Kill(i int) error {
	p := f.pods[i]
	p.killed = true
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("stampede: pod %d not reaped after SIGKILL", i)
	}
}

// Close tells every pod to exit and waits for it (SIGKILL after 10
// seconds). It returns the exit errors of pods that were not killed.
func (f *Fleet) Close() error {
	for _, p := range f.pods {
		b, _ := json.Marshal(command{Op: "exit"})
		_, _ = p.stdin.Write(append(b, '\n'))
		_ = p.stdin.Close()
	}
	var errs []error
	for _, p := range f.pods {
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			errs = append(errs, fmt.Errorf("stampede: pod %d did not exit: killed", p.i))
			continue
		}
		if p.err != nil && !p.killed {
			errs = append(errs, fmt.Errorf("stampede: pod %d: %w", p.i, p.err))
		}
	}
	return errors.Join(errs...)
}

// Config is one harness run.
type Config struct {
	Pods, Callers int
	Load          time.Duration
	Rounds        int
	Redis         string // address; "" starts a private redis-server
	Mode          string
	Lock          lockSettings
	OpTimeout     time.Duration
	// KillRedisAfter, if not 0, SIGKILLs the private Redis that long into
	// the first round; RestartRedisAfter, if not 0, starts it again that
	// long after the kill.
	KillRedisAfter, RestartRedisAfter time.Duration
	// RoundTimeout bounds how long the harness waits for a round's results.
	// default: 2 minutes
	RoundTimeout time.Duration
	Spawn        Spawner
}

// RoundStats is one round's report.
type RoundStats struct {
	Round         int            `json:"round"`
	Mode          string         `json:"mode"`
	Key           string         `json:"key"`
	Pods          int            `json:"pods"`
	Callers       int            `json:"callers"`
	Answered      int            `json:"answered"` // callers whose pod reported back
	LoaderCalls   int            `json:"loader_calls"`
	Errors        int            `json:"errors"`
	FailOpen      int            `json:"fail_open"`
	RedisCommands int64          `json:"redis_commands"`    // INFO commandstats delta, script-internal commands included; -1 unknown
	RedisCalls    int64          `json:"redis_round_trips"` // commands the pods' clients sent
	P50ms         float64        `json:"p50_ms"`
	P99ms         float64        `json:"p99_ms"`
	Maxms         float64        `json:"max_ms"`
	LoadMS        float64        `json:"load_ms"`
	Sources       map[string]int `json:"sources"`
	Values        map[string]int `json:"values"`
	PodErrors     []string       `json:"pod_errors,omitempty"`
}

func (c *Config) defaults() {
	if c.Pods <= 0 {
		c.Pods = 8
	}
	if c.Callers <= 0 {
		c.Callers = 64
	}
	if c.Load <= 0 {
		c.Load = 200 * time.Millisecond
	}
	if c.Rounds <= 0 {
		c.Rounds = 5
	}
	if c.Mode == "" {
		c.Mode = modePipeline
	}
	if c.RoundTimeout <= 0 {
		c.RoundTimeout = 2 * time.Minute
	}
}

// Run runs the harness: it starts Redis if asked, the pods, one warm-up
// round (not reported: it loads the scripts and opens the connections),
// then cfg.Rounds rounds on fresh keys, calling report after each.
func Run(ctx context.Context, cfg Config, report func(RoundStats)) error {
	cfg.defaults()
	if cfg.Mode != modePipeline && cfg.Mode != modePoll {
		return fmt.Errorf("stampede: -mode must be %q or %q, got %q", modePipeline, modePoll, cfg.Mode)
	}
	if cfg.Spawn == nil {
		s, err := selfSpawner()
		if err != nil {
			return err
		}
		cfg.Spawn = s
	}
	addr := cfg.Redis
	var priv *redistest.Server
	if addr == "" {
		s, closeRedis, err := redistest.New()
		if err != nil {
			return fmt.Errorf("stampede: %w (or pass -redis ADDR)", err)
		}
		defer closeRedis()
		priv, addr = s, s.Addr()
	} else if cfg.KillRedisAfter > 0 {
		return errors.New("stampede: -kill-redis-after needs the private Redis: leave -redis out")
	}
	admin := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer admin.Close()

	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "stampede-" + hex.EncodeToString(b[:]) // fresh namespace: fresh keys

	cfgs := make([]podConfig, cfg.Pods)
	for i := range cfgs {
		cfgs[i] = podConfig{Pod: i, Mode: cfg.Mode, Addr: addr, Name: name, Callers: cfg.Callers,
			Load: cfg.Load, Lock: cfg.Lock, OpTimeout: cfg.OpTimeout}
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	fleet, err := StartFleet(sctx, cfg.Spawn, cfgs)
	if err != nil {
		return err
	}
	defer fleet.Close()
	if cfg.Mode == modePipeline {
		// Wait until every pod's announcement subscription is live, so
		// that the first round measures the steady state.
		if err := waitSubscribers(sctx, admin, name, cfg.Pods); err != nil {
			return err
		}
	}
	if _, err := runOne(ctx, fleet, admin, cfg, 0, "warmup", nil); err != nil {
		return err
	}
	for r := 1; r <= cfg.Rounds; r++ {
		var chaos func()
		if r == 1 && priv != nil && cfg.KillRedisAfter > 0 {
			chaos = func() { killRedisLater(priv, cfg.KillRedisAfter, cfg.RestartRedisAfter) }
		}
		st, err := runOne(ctx, fleet, admin, cfg, r, fmt.Sprintf("k%d", r), chaos)
		if err != nil {
			return err
		}
		report(st)
	}
	return fleet.Close()
}

func killRedisLater(priv *redistest.Server, after, restart time.Duration) {
	time.AfterFunc(after, func() {
		if err := priv.Kill(); err != nil {
			fmt.Fprintln(os.Stderr, "stampede: kill redis:", err)
			return
		}
		fmt.Fprintf(os.Stderr, "stampede: redis-server SIGKILLed %v into round 1\n", after)
		if restart > 0 {
			time.Sleep(restart)
			if err := priv.Restart(); err != nil {
				fmt.Fprintln(os.Stderr, "stampede: restart redis:", err)
				return
			}
			fmt.Fprintf(os.Stderr, "stampede: redis-server restarted %v after the kill\n", restart)
		}
	})
}

func waitSubscribers(ctx context.Context, c *redis.Client, name string, n int) error {
	ks, err := rkey.New(rkey.DefaultPrefix, name)
	if err != nil {
		return err
	}
	for {
		m, err := c.PubSubNumSub(ctx, ks.Channel()).Result()
		if err == nil && m[ks.Channel()] >= int64(n) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stampede: pods' announcement subscriptions not live: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// runOne runs one round on key across every live pod and gathers its
// figures. chaos, if not nil, is called at the round's start.
func runOne(ctx context.Context, f *Fleet, admin *redis.Client, cfg Config, round int, key string, chaos func()) (RoundStats, error) {
	st := RoundStats{Round: round, Mode: cfg.Mode, Key: key, Pods: f.Len(), Callers: f.Len() * cfg.Callers,
		LoadMS: ms(cfg.Load), Sources: map[string]int{}, Values: map[string]int{}}
	before := commandCalls(ctx, admin)
	start := time.Now().Add(50 * time.Millisecond) // time for every pod to hear "go"
	sent := make([]bool, f.Len())
	for i := range f.Len() {
		if err := f.Go(i, key, start, 0); err != nil {
			st.PodErrors = append(st.PodErrors, fmt.Sprintf("pod %d: %v", i, err))
			continue
		}
		sent[i] = true
	}
	if chaos != nil {
		time.AfterFunc(time.Until(start), chaos)
	}
	var lat []int64
	deadline := time.Now().Add(cfg.RoundTimeout)
	for i := range f.Len() {
		if !sent[i] {
			continue
		}
		r, err := f.Result(i, key, max(time.Until(deadline), time.Millisecond))
		if err != nil {
			st.PodErrors = append(st.PodErrors, err.Error())
			continue
		}
		st.Answered += r.Callers
		st.Errors += r.Errors
		st.FailOpen += r.FailOpen
		st.RedisCalls += r.RoundTrips
		lat = append(lat, r.LatencyUS...)
		for k, v := range r.Sources {
			st.Sources[k] += v
		}
		for k, v := range r.Values {
			st.Values[k] += v
		}
		if r.ErrSample != "" {
			st.PodErrors = append(st.PodErrors, fmt.Sprintf("pod %d: %s", i, r.ErrSample))
		}
	}
	// Callers whose pod never answered count as errors.
	st.Errors += st.Callers - st.Answered
	st.LoaderCalls = f.Loads(key)
	if after := commandCalls(ctx, admin); before >= 0 && after >= before {
		st.RedisCommands = after - before
	} else {
		st.RedisCommands = -1
	}
	st.P50ms, st.P99ms, st.Maxms = percentile(lat, 0.50), percentile(lat, 0.99), percentile(lat, 1)
	if ctx.Err() != nil {
		return st, ctx.Err()
	}
	return st, nil
}

// percentile returns the nearest-rank q-quantile of microsecond samples, in
// milliseconds; NaN for none.
func percentile(us []int64, q float64) float64 {
	if len(us) == 0 {
		return math.NaN()
	}
	s := slices.Clone(us)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	i = min(max(i, 0), len(s)-1)
	return float64(s[i]) / 1000
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// lockDefaultsForReport are the lock settings a zero lockSettings means.
func lockDefaultsForReport(l lockSettings) lockSettings {
	if l.Lease == 0 {
		l.Lease = resilience.DefaultLockLease
	}
	if l.Wait == 0 {
		l.Wait = resilience.DefaultLockWait
	}
	return l
}
