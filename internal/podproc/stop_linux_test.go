package podproc_test

import (
	"syscall"
	"testing"

	"github.com/herdguard/herdguard/internal/podproc"
)

// waitStopped waits until process pid is stopped: wait4 with WUNTRACED
// reports the stop without reaping (the pod's own reaper waits for its
// exit only).
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, syscall.WUNTRACED, nil); err != nil {
		t.Fatal(err)
	}
	if !ws.Stopped() || ws.StopSignal() != syscall.SIGSTOP {
		t.Fatalf("wait status %v, want stopped by SIGSTOP", ws)
	}
}

func TestProc_StopCont(t *testing.T) {
	p := podproc.Start(t, role("echo"))
	expect(t, p, "ready")
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, p.Pid())
	if err := p.Send("after"); err != nil { // read once continued
		t.Fatal(err)
	}
	if err := p.Cont(); err != nil {
		t.Fatal(err)
	}
	if l := expect(t, p, "echo "); l != "echo after" {
		t.Fatalf("got %q", l)
	}
}

func TestProc_Close_stoppedPod(t *testing.T) {
	p := podproc.Start(t, role("echo"))
	expect(t, p, "ready")
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, p.Pid())
	if err := p.Close(within); err != nil {
		t.Fatalf("Close of a stopped pod = %v, want it continued to exit cleanly", err)
	}
	gone(t, p.Pid())
}
