package podproc_test

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/herdguard/herdguard/internal/podproc"
)

// within bounds every wait of these tests: only a broken pod exceeds it.
const within = time.Minute

func role(r string) podproc.Spec {
	return podproc.Spec{Name: r, Env: []string{roleEnv + "=" + r}}
}

func expect(t *testing.T, p *podproc.Proc, prefix string) string {
	t.Helper()
	l, err := p.Expect(prefix, within)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// gone fails t if process pid still exists (running or a zombie).
func gone(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("process %d still exists: kill -0 = %v", pid, err)
	}
}

func TestProc_echo(t *testing.T) {
	p := podproc.Start(t, role("echo"))
	expect(t, p, "ready")
	if err := p.Send("hello"); err != nil {
		t.Fatal(err)
	}
	if l := expect(t, p, "echo "); l != "echo hello" {
		t.Fatalf("got %q, want %q", l, "echo hello")
	}
	if err := p.SendJSON(map[string]int{"n": 1}); err != nil {
		t.Fatal(err)
	}
	if l := expect(t, p, "echo "); l != `echo {"n":1}` {
		t.Fatalf("got %q", l)
	}
	if err := p.Close(within); err != nil {
		t.Fatalf("Close of a pod whose stdin closed = %v, want its clean exit", err)
	}
	if !p.Exited() || p.Err() != nil || p.Killed() {
		t.Fatalf("exited %v, err %v, killed %v", p.Exited(), p.Err(), p.Killed())
	}
	gone(t, p.Pid())
}

func TestProc_OnLine_OnExit(t *testing.T) {
	lines := make(chan string, 16)
	exited := make(chan bool, 1)
	var p *podproc.Proc
	s := role("echo")
	s.OnLine = func(l []byte) { lines <- string(l) }
	s.OnExit = func() { exited <- p.Exited() }
	p, err := podproc.StartProc(s)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(0)
	if l := <-lines; l != "ready" {
		t.Fatalf("first line %q", l)
	}
	if err := p.Send("a"); err != nil {
		t.Fatal(err)
	}
	if l := <-lines; l != "echo a" {
		t.Fatalf("line %q", l)
	}
	if _, err := p.Expect("x", within); err == nil {
		t.Fatal("Expect on a pod with OnLine did not fail")
	}
	if err := p.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	if done := <-exited; !done {
		t.Fatal("OnExit ran before Done was closed")
	}
}

func TestProc_Kill(t *testing.T) {
	p := podproc.Start(t, role("hang"))
	expect(t, p, "ready")
	if err := p.Kill(within); err != nil {
		t.Fatal(err)
	}
	if !p.Exited() || !p.Killed() {
		t.Fatalf("after Kill: exited %v, killed %v", p.Exited(), p.Killed())
	}
	var ee *exec.ExitError
	if !errors.As(p.Err(), &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("exit status %v, want killed by SIGKILL", p.Err())
	}
	if err := p.Close(within); err != nil {
		t.Fatalf("Close after Kill = %v, want nil", err)
	}
	gone(t, p.Pid())
}

func TestProc_Close_killsHungPod(t *testing.T) {
	p := podproc.Start(t, role("hang"))
	expect(t, p, "ready")
	if err := p.Close(100 * time.Millisecond); !errors.Is(err, podproc.ErrNotExited) {
		t.Fatalf("Close of a pod that ignores its stdin = %v, want ErrNotExited", err)
	}
	gone(t, p.Pid())
	if err := p.Close(0); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

func TestProc_diedReportsStderr(t *testing.T) {
	p := podproc.Start(t, role("die"))
	_, err := p.Expect("ready", within)
	if err == nil || !strings.Contains(err.Error(), "boom: the pod could not start") || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("Expect from a pod that died = %v, want its exit status and stderr", err)
	}
	if got := p.Stderr(); got != "boom: the pod could not start\n" {
		t.Fatalf("Stderr = %q", got)
	}
	if err := p.Close(0); err == nil || err.Error() != "exit status 3" {
		t.Fatalf("Close = %v, want exit status 3", err)
	}
}

// fakeTB records what [podproc.Start] does with its test.
type fakeTB struct {
	failed   bool
	cleanups []func()
	logs     []string
}

func (f *fakeTB) Helper()               {}
func (f *fakeTB) Cleanup(fn func())     { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Failed() bool          { return f.failed }
func (f *fakeTB) Fatalf(string, ...any) { panic("Fatalf") }
func (f *fakeTB) Logf(format string, args ...any) {
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}

func TestStart_cleanup(t *testing.T) {
	for _, failed := range []bool{false, true} {
		t.Run(fmt.Sprint("failed=", failed), func(t *testing.T) {
			tb := &fakeTB{failed: failed}
			p := podproc.Start(tb, role("die"))
			<-p.Done()
			h := podproc.Start(tb, role("hang"))
			expect(t, h, "ready")
			for _, fn := range tb.cleanups {
				fn()
			}
			gone(t, h.Pid())
			logged := strings.Join(tb.logs, "\n")
			if has := strings.Contains(logged, "die's stderr:\nboom"); has != failed {
				t.Fatalf("test failed %v, stderr logged %v: %q", failed, has, logged)
			}
		})
	}
}
