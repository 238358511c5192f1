package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
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
	return f.send(i, command{Op: "round", Key: key, Start: start.UnixNano(), Load: load})
}

// send writes c to pod i.
func (f *Fleet) send(i int, c command) error {
	b, _ := json.Marshal(c)
	_, err := f.pods[i].stdin.Write(append(b, '\n'))
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
