package redistest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// portAttempts bounds how often start-up picks a new port after losing one
// to another process.
const portAttempts = 5

// Server is a private redis-server process. Its methods are safe for
// concurrent use.
type Server struct {
	bin  string
	dir  string
	port int
	args []string // extra arguments after the base ones

	mu     sync.Mutex // guards proc and closed
	proc   *process   // nil while stopped
	closed bool

	clients clients[*redis.Client]
}

// Start starts a server for one test (or benchmark) and registers its
// cleanup with tb. It fails tb if the server cannot start.
func Start(tb testing.TB) *Server {
	tb.Helper()
	return start(tb, New, func(s *Server) string { return fmt.Sprintf("redis-server %s:\n%s", s.Addr(), s.Log()) })
}

// New starts a server without a testing.TB, for TestMain. The caller must
// call closeFn, which kills the server, closes the clients handed out by
// [Server.Client] and removes the server's directory.
func New() (s *Server, closeFn func(), err error) {
	s, err = newServer(nil)
	if err != nil {
		return nil, nil, err
	}
	return s, s.close, nil
}

func newServer(extra func(port int, dir string) ([]string, error)) (*Server, error) {
	bin, err := lookPath("redis-server")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, fmt.Errorf("redistest: temp dir: %w", err)
	}
	var last error
	for range portAttempts {
		port, err := freePort()
		if err != nil {
			last = err
			continue
		}
		s := &Server{bin: bin, dir: dir, port: port}
		if extra != nil {
			if s.args, err = extra(port, dir); err != nil {
				last = err
				continue
			}
		}
		p, err := s.launch()
		if err == nil {
			s.proc = p
			return s, nil
		}
		last = err
		if !errors.Is(err, errExited) || !p.bindFailed() {
			break
		}
	}
	_ = os.RemoveAll(dir)
	return nil, last
}

// launch starts the process on s.port and waits until it answers. On
// failure the process is killed; the returned process (possibly nil) is
// there only so that its log can be inspected.
func (s *Server) launch() (*process, error) {
	args := append(baseArgs(s.port, s.dir), s.args...)
	p, err := spawn(s.bin, filepath.Join(s.dir, "redis-"+strconv.Itoa(s.port)+".log"), args)
	if err != nil {
		return nil, err
	}
	if err := p.waitReady(s.Addr()); err != nil {
		_ = p.kill()
		return p, err
	}
	return p, nil
}

// Addr returns the server's host:port.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Dir returns the server's temporary directory, which holds its log.
func (s *Server) Dir() string { return s.dir }

// Log returns the tail of the server's log, for failure messages.
func (s *Server) Log() string {
	return tail(filepath.Join(s.dir, "redis-"+strconv.Itoa(s.port)+".log"))
}

// Client returns a new client of the server; the server's cleanup closes
// it. Each opt may adjust the options before the client is built (the
// address is already set).
func (s *Server) Client(opts ...func(*redis.Options)) *redis.Client {
	o := &redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true}
	for _, f := range opts {
		f(o)
	}
	return s.clients.add(redis.NewClient(o))
}

// Kill ends the server with SIGKILL, as a crash would, and waits for it to
// exit. [Server.Restart] brings it back.
func (s *Server) Kill() error {
	p := s.take()
	if p == nil {
		return nil
	}
	return p.kill()
}

// Stop shuts the server down with SIGTERM (SIGKILL if it lingers).
// [Server.Restart] brings it back.
func (s *Server) Stop() error {
	p := s.take()
	if p == nil {
		return nil
	}
	return p.stop()
}

// Pause freezes the server with SIGSTOP: connections stay open but nothing
// is answered, as with a hung host.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume undoes [Server.Pause] with SIGCONT.
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		return fmt.Errorf("redistest: server %s is not running", s.Addr())
	}
	return p.signal(sig)
}

// Restart kills the server if it runs and starts it again on the same port,
// waiting until it answers. Data is lost (persistence is off). Losing the
// port to another process is retried for a few seconds.
func (s *Server) Restart() error {
	if err := s.Kill(); err != nil {
		return err
	}
	deadline := time.Now().Add(startTimeout)
	for {
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return errors.New("redistest: restart after close")
		}
		p, err := s.launch()
		if err == nil {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.closed { // closed while starting: do not leak the process
				return errors.Join(errors.New("redistest: restart after close"), p.kill())
			}
			s.proc = p
			return nil
		}
		if !errors.Is(err, errExited) || !p.bindFailed() || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// take detaches the running process, if any, from s.
func (s *Server) take() *process {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	s.proc = nil
	return p
}

// close kills the server, closes its clients and removes its directory.
func (s *Server) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.clients.close()
	if p := s.take(); p != nil {
		_ = p.kill()
	}
	_ = os.RemoveAll(s.dir)
}
