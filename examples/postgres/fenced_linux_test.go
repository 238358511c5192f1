package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herdguard/herdguard/internal/podproc"
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
	*podproc.Proc
	name   string
	events chan podEvent // closed when stdout ends
}

// startPod starts a pod; the test's cleanup resumes it, closes its stdin
// and waits for it to exit, killing it if it lingers.
func startPod(t *testing.T, name string, c podConfig) *podProc {
	t.Helper()
	env, err := podproc.JSONEnv(podEnv, c)
	if err != nil {
		t.Fatal(err)
	}
	p := &podProc{name: name, events: make(chan podEvent, 16)}
	p.Proc, err = podproc.StartProc(podproc.Spec{Name: "pod " + name, Env: []string{env}, Stderr: os.Stderr,
		OnLine: func(line []byte) {
			var ev podEvent
			if err := json.Unmarshal(line, &ev); err != nil {
				t.Errorf("pod %s printed %q: %v", name, line, err)
				return
			}
			p.events <- ev
		},
		OnExit: func() { close(p.events) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(stepBound); errors.Is(err, podproc.ErrNotExited) {
			t.Errorf("pod %s did not exit within %v of its stdin closing", name, stepBound)
		}
	})
	return p
}

// send writes line to the pod's stdin.
func (p *podProc) send(t *testing.T, line string) {
	t.Helper()
	if err := p.Send(line); err != nil {
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
	if err := p.Signal(sig); err != nil {
		t.Fatalf("pod %s: %v: %v", p.name, sig, err)
	}
}
