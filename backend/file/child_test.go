//go:build unix

package file

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/internal/podproc"
)

// childEnv selects a child process's role; childArgs carries its
// arguments as JSON.
const (
	childEnv  = "HERDGUARD_FILE_CHILD"
	childArgs = "HERDGUARD_FILE_ARGS"
)

type childConfig struct {
	Dir       string        `json:"dir"`
	Namespace string        `json:"ns"`
	Key       string        `json:"key"`
	Heartbeat time.Duration `json:"heartbeat"`
	Lease     time.Duration `json:"lease"`
	// Pipeline children (pipeline_test.go).
	Callers int           `json:"callers,omitempty"`
	Keys    []string      `json:"keys,omitempty"`
	Sleep   time.Duration `json:"sleep,omitempty"`
	Loads   string        `json:"loads,omitempty"` // file the loads are appended to
	Loop    bool          `json:"loop,omitempty"`  // call until a second line on stdin
}

// child is a running child process; its stdout is read line by line.
type child struct{ *podproc.Proc }

// startChild starts this test binary in role; it is killed at the test's
// end if still running.
func startChild(t *testing.T, role string, cfg childConfig) *child {
	t.Helper()
	args, err := podproc.JSONEnv(childArgs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &child{podproc.Start(t, podproc.Spec{Name: "child " + role,
		Env: []string{childEnv + "=" + role, args}, Stderr: os.Stderr})}
}

// expect waits for the child's next line that starts with prefix and
// returns it.
func (c *child) expect(t *testing.T, prefix string, within time.Duration) string {
	t.Helper()
	l, err := c.Expect(prefix, within)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// send writes line to the child's stdin.
func (c *child) send(t *testing.T, line string) {
	t.Helper()
	if err := c.Send(line); err != nil {
		t.Fatal(err)
	}
}

// childMain runs a child's role and returns its exit code.
func childMain(role string) int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(os.Getenv(childArgs)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	var err error
	switch role {
	case "hold":
		err = childHold(cfg)
	case "subscribe":
		err = childSubscribe(cfg)
	case "watch":
		err = childWatch(cfg)
	case "waker":
		err = childWaker(cfg)
	case "pipeline":
		err = childPipeline(cfg)
	case "race":
		err = childRace(cfg)
	case "getter":
		err = childGetter(cfg)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

func openChild(cfg childConfig) (*Shared, error) {
	b, err := New(cfg.Dir, Options{Sweep: -1})
	if err != nil {
		return nil, err
	}
	return b.open(backend.Scope{Namespace: cfg.Namespace, Heartbeat: cfg.Heartbeat})
}

// childHold takes the lock, beats, prints "acquired <fence>" and waits to
// be killed; when a beat finds the lease lost it tries to write back and
// prints "lost <Save's error>".
func childHold(cfg childConfig) error {
	s, err := openChild(cfg)
	if err != nil {
		return err
	}
	ctx := context.Background()
	l, err := s.TryAcquire(ctx, cfg.Key, cfg.Lease)
	if err != nil {
		return err
	}
	lost := make(chan error, 1)
	l.KeepAlive(ctx, func(err error) { lost <- err })
	fmt.Printf("acquired %d\n", l.Fence())
	<-lost
	_, err = s.Save(ctx, cfg.Key, []byte("late"), backend.Save{Fence: l.Fence(), Token: l.Token(), Release: true})
	fmt.Printf("lost %v\n", errors.Is(err, backend.ErrLockLost))
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent ends
	return nil
}

// childSubscribe prints "ready" once subscribed and "woke" when notified.
func childSubscribe(cfg childConfig) error {
	s, err := openChild(cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	ch, stop := s.Subscribe(cfg.Key)
	defer stop()
	fmt.Println("ready")
	select {
	case <-ch:
		fmt.Println("woke")
		return nil
	case <-time.After(time.Minute):
		return errors.New("not woken")
	}
}

// childWatch prints "ready" once watching and "write <hex key> <origin>"
// for the first announcement.
func childWatch(cfg childConfig) error {
	s, err := openChild(cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	got := make(chan string, 1)
	stop := s.Watch(func(key, origin string) {
		select {
		case got <- hex.EncodeToString([]byte(key)) + " " + origin:
		default:
		}
	}, func() {})
	defer stop()
	fmt.Println("ready")
	select {
	case w := <-got:
		fmt.Println("write", w)
		return nil
	case <-time.After(time.Minute):
		return errors.New("no announcement")
	}
}
