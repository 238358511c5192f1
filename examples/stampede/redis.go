package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// privateRedis is a redis-server process the harness started itself, on a
// free loopback port, without persistence. Its methods are safe for
// concurrent use.
type privateRedis struct {
	bin  string
	dir  string
	port int

	mu     sync.Mutex // guards cmd and exited
	cmd    *exec.Cmd  // nil while killed
	exited chan struct{}
}

// startRedis starts redis-server on a free loopback port and waits until it
// answers PING.
func startRedis() (*privateRedis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("stampede: redis-server not found on PATH (install it, or pass -redis ADDR): %w", err)
	}
	dir, err := os.MkdirTemp("", "stampede-redis-")
	if err != nil {
		return nil, err
	}
	var last error
	for range 5 { // another process may take the free port first
		port, err := freePort()
		if err != nil {
			last = err
			continue
		}
		r := &privateRedis{bin: bin, dir: dir, port: port}
		if last = r.launch(); last == nil {
			return r, nil
		}
	}
	_ = os.RemoveAll(dir)
	return nil, last
}

func (r *privateRedis) launch() error {
	cmd := exec.Command(r.bin,
		"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.dir, "--daemonize", "no",
		"--loglevel", "warning")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a ^C to the harness does not reach it first
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("stampede: start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { // reaps the process; ends when it exits, which kill forces
		_ = cmd.Wait()
		close(exited)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := ping(r.Addr()); err == nil {
			break
		}
		select {
		case <-exited:
			return fmt.Errorf("stampede: redis-server on port %d exited during start-up", r.port)
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("stampede: redis-server on port %d not ready after 10s", r.port)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.mu.Lock()
	r.cmd, r.exited = cmd, exited
	r.mu.Unlock()
	return nil
}

// Addr returns host:port.
func (r *privateRedis) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)) }

// Kill ends the server with SIGKILL, as a crash would, and reaps it.
func (r *privateRedis) Kill() error {
	r.mu.Lock()
	cmd, exited := r.cmd, r.exited
	r.cmd = nil
	r.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("stampede: redis-server %d did not exit after SIGKILL", cmd.Process.Pid)
	}
}

// Restart starts the server again on the same port, empty.
func (r *privateRedis) Restart() error {
	if err := r.Kill(); err != nil {
		return err
	}
	var err error
	for range 20 { // the port may linger a moment
		if err = r.launch(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// Close kills the server and removes its directory.
func (r *privateRedis) Close() error {
	err := r.Kill()
	_ = os.RemoveAll(r.dir)
	return err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

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

// commandCalls returns the total of calls in INFO commandstats, which
// counts commands run inside Lua scripts as well as the scripts themselves,
// leaving out INFO (the harness's own reads). -1 when Redis cannot tell.
func commandCalls(ctx context.Context, c *redis.Client) int64 {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	s, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return -1
	}
	return parseCommandStats(s)
}

// parseCommandStats sums calls= over the cmdstat_ lines of s, leaving out
// cmdstat_info.
func parseCommandStats(s string) int64 {
	var total int64
	for line := range strings.Lines(s) {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		for f := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return -1
				}
				total += n
			}
		}
	}
	return total
}
