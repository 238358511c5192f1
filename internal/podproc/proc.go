package podproc

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Spec says how to start one pod. The zero value starts this executable
// as a test binary that runs no test.
type Spec struct {
	// Name labels the pod in errors and logs.
	// default: "pod <pid>"
	Name string
	// Cmd, if not nil, returns the command to run; its Stdin, Stdout and
	// Stderr must be unset.
	// default: this executable with -test.run=^$
	Cmd func() *exec.Cmd
	// Env is added to the command's environment, which is otherwise the
	// parent's (or the Cmd's own, if it sets one).
	Env []string
	// OnLine, if not nil, is called with each line of the pod's stdout,
	// in order, from the pod's reader goroutine; line is valid only during
	// the call. Without OnLine the lines go to [Proc.Expect].
	OnLine func(line []byte)
	// OnExit, if not nil, is called once, after the pod's stdout ended,
	// the pod was reaped and [Proc.Done] was closed.
	OnExit func()
	// MaxLine bounds one line of stdout; a longer one ends the reading.
	// default: 16 MiB
	MaxLine int
	// Stderr, if not nil, also receives the pod's stderr.
	Stderr io.Writer
}

// ErrNotExited is returned by [Proc.Close] for a pod that had to be
// killed because it did not exit within the grace it was given.
var ErrNotExited = errors.New("podproc: pod did not exit in time: killed")

// Proc is a running pod.
type Proc struct {
	name   string
	cmd    *exec.Cmd
	stderr *tailBuffer
	lines  chan string   // stdout lines without Spec.OnLine; closed at EOF
	done   chan struct{} // closed once stdout ended and the pod is reaped

	stdinMu sync.Mutex // guards stdin's writes and close
	stdin   io.WriteCloser

	mu      sync.Mutex // guards killed
	killed  bool       // the parent sent SIGKILL
	exitErr error      // written before done is closed
}

// Start starts a pod as s says and registers a cleanup with t that stops
// it ([Proc.Close] with no grace) and, if t failed, logs its stderr. It
// fails t if the pod cannot start.
func Start(t TB, s Spec) *Proc {
	t.Helper()
	p, err := StartProc(s)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		_ = p.Close(0)
		if out := p.Stderr(); t.Failed() && out != "" {
			t.Logf("%s's stderr:\n%s", p.name, out)
		}
	})
	return p
}

// TB is the part of [testing.TB] that [Start] uses.
type TB interface {
	Helper()
	Cleanup(func())
	Failed() bool
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
}

// StartProc starts a pod as s says. The caller must [Proc.Close] it.
func StartProc(s Spec) (*Proc, error) {
	cmd, err := command(s)
	if err != nil {
		return nil, err
	}
	p := &Proc{cmd: cmd, stderr: &tailBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if s.Stderr != nil {
		cmd.Stderr = io.MultiWriter(p.stderr, s.Stderr)
	}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("podproc: start %s: %w", cmp.Or(s.Name, "pod"), err)
	}
	p.name = cmp.Or(s.Name, fmt.Sprintf("pod %d", cmd.Process.Pid))
	onLine := s.OnLine
	if onLine == nil {
		p.lines = make(chan string, 1024)
		onLine = func(l []byte) { p.lines <- string(l) }
	}
	maxLine := s.MaxLine
	if maxLine <= 0 {
		maxLine = 16 << 20
	}
	// The reader ends when the pod's stdout closes (it exited or was
	// killed); it then reaps the pod.
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 64<<10), maxLine)
		for sc.Scan() {
			onLine(sc.Bytes())
		}
		if p.lines != nil {
			close(p.lines)
		}
		_, _ = io.Copy(io.Discard, stdout) // a line too long: let the pod go on
		p.exitErr = cmd.Wait()
		close(p.done)
		if s.OnExit != nil {
			s.OnExit()
		}
	}()
	return p, nil
}

func command(s Spec) (*exec.Cmd, error) {
	var cmd *exec.Cmd
	if s.Cmd != nil {
		cmd = s.Cmd()
	} else {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cmd = exec.Command(exe, "-test.run=^$")
	}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, s.Env...)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = sysProcAttr()
	}
	return cmd, nil
}

// JSONEnv returns name=JSON of v, an entry for [Spec.Env] that carries a
// pod's configuration.
func JSONEnv(name string, v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return name + "=" + string(b), nil
}

// Name returns the pod's label.
func (p *Proc) Name() string { return p.name }

// Pid returns the pod's process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Send writes line and a newline to the pod's stdin.
func (p *Proc) Send(line string) error {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	_, err := io.WriteString(p.stdin, line+"\n")
	return err
}

// SendJSON writes v as one JSON line to the pod's stdin.
func (p *Proc) SendJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return p.Send(string(b))
}

// CloseStdin closes the pod's stdin: a pod reading commands takes it as
// the parent's leaving.
func (p *Proc) CloseStdin() error {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	return p.stdin.Close()
}

// Expect waits up to within for the pod's next stdout line that starts
// with prefix, and returns it; earlier lines are dropped. It fails if the
// pod's stdout ends first (the error quotes its stderr). It is for pods
// started without [Spec.OnLine].
func (p *Proc) Expect(prefix string, within time.Duration) (string, error) {
	if p.lines == nil {
		return "", errors.New("podproc: Expect on a pod with OnLine")
	}
	t := time.NewTimer(within)
	defer t.Stop()
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				<-p.done
				return "", fmt.Errorf("podproc: %s exited (%v) before printing %q; stderr:\n%s", p.name, p.exitErr, prefix, p.Stderr())
			}
			if strings.HasPrefix(l, prefix) {
				return l, nil
			}
		case <-t.C:
			return "", fmt.Errorf("podproc: %s did not print %q within %v", p.name, prefix, within)
		}
	}
}

// Signal sends sig to the pod.
func (p *Proc) Signal(sig syscall.Signal) error {
	if sig == syscall.SIGKILL {
		p.mu.Lock()
		p.killed = true
		p.mu.Unlock()
	}
	return p.cmd.Process.Signal(sig)
}

// Kill ends the pod with SIGKILL and waits up to within until it is
// reaped. A pod that already exited is no error.
func (p *Proc) Kill(within time.Duration) error {
	if err := p.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("podproc: kill %s: %w", p.name, err)
	}
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		return fmt.Errorf("podproc: %s not reaped %v after SIGKILL", p.name, within)
	}
}

// Done returns a channel closed once the pod's stdout has ended and the
// pod is reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the pod is reaped.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err returns the pod's exit status (nil for a clean exit) once
// [Proc.Done] is closed, nil before.
func (p *Proc) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.exitErr
}

// Killed reports whether the parent sent the pod SIGKILL.
func (p *Proc) Killed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killed
}

// Stderr returns the last 32 KiB the pod wrote to stderr.
func (p *Proc) Stderr() string { return p.stderr.String() }

// Close closes the pod's stdin and continues it (it may be stopped), waits
// up to grace for it to exit, then SIGKILLs it, and waits until it is
// reaped. It returns [ErrNotExited] if a grace was given and the pod had
// to be killed, else the pod's exit error unless the parent killed it.
// Close may be called more than once.
func (p *Proc) Close(grace time.Duration) error {
	_ = p.CloseStdin()
	if !p.Exited() {
		p.resume()
	}
	if grace > 0 {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-p.done:
		case <-t.C:
		}
	}
	if !p.Exited() {
		_ = p.Signal(syscall.SIGKILL)
		<-p.done
		if grace > 0 {
			return fmt.Errorf("%w (%s, after %v)", ErrNotExited, p.name, grace)
		}
		return nil
	}
	if p.Killed() {
		return nil
	}
	return p.exitErr
}

// tailBuffer keeps the last 32 KiB written to it.
type tailBuffer struct {
	mu sync.Mutex // guards b
	b  []byte
}

func (w *tailBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if n := len(w.b) - 32<<10; n > 0 {
		w.b = append(w.b[:0], w.b[n:]...)
	}
	return len(p), nil
}

func (w *tailBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}
