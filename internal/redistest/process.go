package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// startTimeout bounds how long a process may take to answer PING.
const startTimeout = 10 * time.Second

// missingBinary is the message for a machine without Redis installed.
const missingBinary = "redistest: %s not found on PATH: run the repository's test script, " +
	"./scripts/test, which installs redis-server and redis-cli"

// lookPath returns the path of a Redis binary, or an error telling the
// reader how to install it.
func lookPath(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf(missingBinary, name)
	}
	return p, nil
}

// process is one running redis-server.
type process struct {
	cmd     *exec.Cmd
	logPath string
	// exited is closed by the waiter goroutine once the process has exited
	// and been reaped.
	exited chan struct{}
}

// spawn starts redis-server with args, logging to logPath (appended to, so
// that a restarted server's log keeps its history).
func spawn(bin, logPath string, args []string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("redistest: open log: %w", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("redistest: start %s: %w", bin, err)
	}
	p := &process{cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	// The waiter reaps the process; it ends when the process exits, which
	// every cleanup path forces with SIGKILL.
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(p.exited)
	}()
	return p, nil
}

// signal sends sig to the process; a process that has exited is not an
// error.
func (p *process) signal(sig syscall.Signal) error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("redistest: signal %v: %w", sig, err)
	}
	return nil
}

// kill sends SIGKILL and waits for the process to be reaped.
func (p *process) kill() error {
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	return p.wait(startTimeout)
}

// stop asks the process to shut down and kills it if it has not within a
// few seconds.
func (p *process) stop() error {
	if err := p.signal(syscall.SIGTERM); err != nil {
		return err
	}
	if p.wait(5*time.Second) == nil {
		return nil
	}
	return p.kill()
}

func (p *process) wait(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.exited:
		return nil
	case <-t.C:
		return fmt.Errorf("redistest: process %d did not exit within %v", p.cmd.Process.Pid, d)
	}
}

// waitReady waits until the server at addr answers PING, the process exits,
// or startTimeout passes.
func (p *process) waitReady(addr string) error {
	deadline := time.Now().Add(startTimeout)
	for {
		err := ping(addr)
		if err == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("redistest: redis-server on %s exited during start-up: %w\n%s",
				addr, errExited, tail(p.logPath))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: redis-server on %s not ready after %v: %v\n%s",
				addr, startTimeout, err, tail(p.logPath))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// errExited marks a process that exited before it was ready.
var errExited = errors.New("process exited")

// bindFailed reports whether the process's log says its port was taken.
func (p *process) bindFailed() bool {
	b, _ := os.ReadFile(p.logPath)
	return bytes.Contains(b, []byte("Address already in use"))
}

// ping sends one PING over a fresh connection and expects +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// freePort returns a loopback TCP port that was free a moment ago. The
// caller must cope with losing the race for it (start-up retries do).
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redistest: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail returns the last lines of the log at path, for failure messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log at %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	const n = 20
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "--- tail of " + path + " ---\n" + strings.Join(lines, "\n")
}

// baseArgs are the arguments every server gets: loopback only, no
// persistence, its files in dir.
func baseArgs(port int, dir string) []string {
	return []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--logfile", "",
	}
}
