package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/herdguard/herdguard/internal/podproc"
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

// Fleet is a set of pods: child processes each running one pipeline (or
// one of its peers, all in the same mode) against the same Redis.
type Fleet struct {
	pods []*pod

	mu     sync.Mutex // guards loads
	loads  map[string]int
	loaded chan struct{} // closed and replaced on each load event
}

type pod struct {
	i       int
	proc    *podproc.Proc
	results chan *podResult
	loads   chan string // keys this pod's loader started on
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
			case <-p.proc.Done():
				ready <- fmt.Errorf("stampede: pod %d exited before it was ready: %v", p.i, p.proc.Err())
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
	env, err := podproc.JSONEnv(podEnv, c)
	if err != nil {
		return nil, err
	}
	p := &pod{i: c.Pod, results: make(chan *podResult, 16), loads: make(chan string, 1024)}
	// The pod's reader passes its events on until its stdout closes (it
	// exited or was killed); then it reaps the pod.
	p.proc, err = podproc.StartProc(podproc.Spec{Name: fmt.Sprintf("pod %d", c.Pod), Cmd: spawn,
		Env: []string{env}, Stderr: os.Stderr, MaxLine: 64 << 20, OnLine: func(line []byte) { f.record(p, line) }})
	if err != nil {
		return nil, fmt.Errorf("stampede: start pod %d: %w", c.Pod, err)
	}
	return p, nil
}

// record passes on one event of pod p.
func (f *Fleet) record(p *pod, line []byte) {
	var ev event
	if json.Unmarshal(line, &ev) != nil {
		return
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
	return f.send(i, command{Op: "round", Key: key, Start: start.UnixNano(), Load: load})
}

// send writes c to pod i.
func (f *Fleet) send(i int, c command) error {
	return f.pods[i].proc.SendJSON(c)
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
		case <-p.proc.Done():
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
			return nil, fmt.Errorf("stampede: pod %d is gone: %v", i, p.proc.Err())
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
		case <-p.proc.Done():
			return fmt.Errorf("stampede: pod %d is gone", i)
		case <-t.C:
			return fmt.Errorf("stampede: pod %d: no load of %q within %v", i, key, timeout)
		}
	}
}

// Signal sends sig to pod i (SIGSTOP, SIGCONT).
func (f *Fleet) Signal(i int, sig syscall.Signal) error {
	return f.pods[i].proc.Signal(sig)
}

// Kill ends pod i with SIGKILL and waits until it is reaped.
func (f *Fleet) Kill(i int) error {
	if err := f.pods[i].proc.Kill(10 * time.Second); err != nil {
		return fmt.Errorf("stampede: %w", err)
	}
	return nil
}

// Close tells every pod to exit and waits for it (SIGKILL after 10
// seconds). It returns the exit errors of pods that were not killed.
func (f *Fleet) Close() error {
	for _, p := range f.pods {
		_ = p.proc.SendJSON(command{Op: "exit"})
		_ = p.proc.CloseStdin()
	}
	var errs []error
	for _, p := range f.pods {
		err := p.proc.Close(10 * time.Second)
		switch {
		case errors.Is(err, podproc.ErrNotExited):
			errs = append(errs, fmt.Errorf("stampede: pod %d did not exit: killed", p.i))
		case err != nil:
			errs = append(errs, fmt.Errorf("stampede: pod %d: %w", p.i, err))
		}
	}
	return errors.Join(errs...)
}
