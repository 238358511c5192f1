package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herdguard/herdguard/internal/redistest"
)

// stepBound bounds each step of the pods' test: only a hang runs past it.
const stepBound = time.Minute

// TestFenced_pausedHolderWriteRefusedAfterTakeover: pods are separate
// processes on a private redis-server (the lock, library defaults) and
// the private PostgreSQL (the downstream row). Pod A wins the lock, reads
// its fence, and is stopped (SIGSTOP) before its downstream write. Pod B
// takes the lock over once A has missed its beats, loads, and writes the
// row under its higher fence. A is resumed (SIGCONT) and makes its write:
// the fence guard refuses it (0 rows), and the row keeps B's value and
// fence.
func TestFenced_pausedHolderWriteRefusedAfterTakeover(t *testing.T) {
	url := databaseURL(t)
	rs := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const table = "fenced_pods"
	if _, err := createReports(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	const key = "report:7"
	cfg := podConfig{Name: "fenced-pods", Redis: rs.Addr(), DSN: url, Table: table, Key: key}
	a, b := cfg, cfg
	a.Value, a.Hold = "from A", true
	b.Value = "from B"
	podA, podB := startPod(t, "A", a), startPod(t, "B", b)
	podA.next(t, "ready")
	podB.next(t, "ready")

	podA.send(t, "get")
	fa := podA.next(t, "fence").Fence
	podA.signal(t, syscall.SIGSTOP)
	stopped := time.Now()
	podB.send(t, "get")
	db1 := podB.next(t, "done")
	t.Logf("FIGURES pod B took the lock over and wrote %v after pod A was stopped", time.Since(stopped).Round(time.Millisecond))
	if db1.Err != "" || db1.Value != b.Value || db1.Fence <= fa {
		t.Fatalf("pod B: %+v; want %q loaded under a fence above A's %d", db1, b.Value, fa)
	}
	if db1.Duplicates != 1 {
		t.Errorf("pod B counts %d duplicate loads, want 1 (the takeover)", db1.Duplicates)
	}
	checkRow(ctx, t, db, table, b.Value, db1.Fence, "after pod B's load")

	podA.signal(t, syscall.SIGCONT)
	podA.send(t, "write")
	da := podA.next(t, "done")
	t.Logf("pod A after SIGCONT: %+v", da)
	if !da.Superseded {
		t.Errorf("pod A's downstream write under fence %d was not refused after B's under %d: %+v", fa, db1.Fence, da)
	}
	checkRow(ctx, t, db, table, b.Value, db1.Fence, "after pod A's late write")
}

// checkRow fails t unless report 7's row holds v under fence.
func checkRow(ctx context.Context, t *testing.T, db *pgxpool.Pool, table, v string, fence int64, when string) {
	t.Helper()
	var gotV string
	var gotFence int64
	if err := db.QueryRow(ctx, "SELECT v, fence FROM "+table+" WHERE id = 7").Scan(&gotV, &gotFence); err != nil {
		t.Fatalf("%s: read the row: %v", when, err)
	}
	if gotV != v || gotFence != fence {
		t.Errorf("%s: the row holds %q under fence %d, want %q under %d", when, gotV, gotFence, v, fence)
	}
}

// podProc is a pod: this test binary run again with podEnv set, its
// stdout read as events.
type podProc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan podEvent // closed when stdout ends
}

// startPod starts a pod; the test's cleanup resumes it, closes its stdin
// and waits for it to exit, killing it if it lingers.
func startPod(t *testing.T, name string, c podConfig) *podProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(c)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), podEnv+"="+string(raw))
	cmd.Stderr = os.Stderr
	// The kernel kills the pod if the test binary dies without cleanups.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &podProc{name: name, cmd: cmd, stdin: stdin, events: make(chan podEvent, 16)}
	// The reader ends with the pod's stdout, at its exit.
	read := make(chan struct{})
	go func() {
		defer close(read)
		defer close(p.events)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var ev podEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Errorf("pod %s printed %q: %v", name, sc.Text(), err)
				continue
			}
			p.events <- ev
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = stdin.Close()
		exited := make(chan struct{})
		go func() {
			<-read
			_ = cmd.Wait()
			close(exited)
		}()
		select {
		case <-exited:
		case <-time.After(stepBound):
			t.Errorf("pod %s did not exit within %v of its stdin closing", name, stepBound)
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	return p
}

// send writes line to the pod's stdin.
func (p *podProc) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		t.Fatalf("pod %s: %v", p.name, err)
	}
}

// next waits for the pod's next event named ev, skipping others.
func (p *podProc) next(t *testing.T, ev string) podEvent {
	t.Helper()
	deadline := time.After(stepBound)
	for {
		select {
		case e, ok := <-p.events:
			if !ok {
				t.Fatalf("pod %s exited before %q", p.name, ev)
			}
			if e.Ev == ev {
				return e
			}
		case <-deadline:
			t.Fatalf("pod %s: no %q within %v", p.name, ev, stepBound)
		}
	}
}

// signal sends sig to the pod.
func (p *podProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("pod %s: %v: %v", p.name, sig, err)
	}
}
