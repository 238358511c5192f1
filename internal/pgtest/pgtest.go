// Package pgtest starts PostgreSQL servers for tests: each in a
// temporary directory, on a free loopback port, with durability off for
// speed, so that a test may stop it (as a crash would) and start it again.
//
// Tests never use a PostgreSQL they did not start. Where the server
// binaries are missing they skip, unless [RequireEnv] is set, as the
// repository's test command sets it: then they fail.
package pgtest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// ErrNoBinaries means no PostgreSQL server binaries were found: tests
// skip with it, or fail when [Required].
var ErrNoBinaries = errors.New("pgtest: no PostgreSQL binaries (initdb, pg_ctl) under /usr/lib/postgresql/*/bin or on PATH")

// RequireEnv is the environment variable that, set to 1, turns a test's
// skip for [ErrNoBinaries] into a failure.
const RequireEnv = "HERDGUARD_REQUIRE_PG"

// Required reports whether [RequireEnv] is set to 1: a test that cannot
// start a server must then fail rather than skip.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// Server is a PostgreSQL server started for tests.
type Server struct {
	bin  string // the directory of initdb, pg_ctl
	dir  string // the temporary directory: data, socket, log
	port int
	cred *syscall.Credential // the postgres user's, when running as root

	mu      sync.Mutex // guards running
	running bool
}

// binDir finds the newest PostgreSQL's binaries.
func binDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) < version(dirs[j]) })
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "pg_ctl")); err == nil {
			return dirs[i], nil
		}
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", ErrNoBinaries
}

func version(bin string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(bin)))
	return n
}

// Start initializes a database cluster in a new temporary directory and
// starts its server. PostgreSQL refuses to run as root: when the tests
// do, the server runs as the postgres user, which owns the directory.
func Start() (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "herdguard-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: dir}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("pgtest: running as root, and no postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	if err := s.run("initdb", "-D", s.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8",
		"--locale=C", "--no-sync"); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s.port, err = freePort()
	if err == nil {
		err = s.Start()
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

// run runs one of the server's binaries, as the postgres user when needed.
func (s *Server) run(name string, args ...string) error {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgtest: %s: %w\n%s", name, err, out)
	}
	return nil
}

// Start starts the server (again), on the same port, and waits until it
// accepts connections.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return nil
	}
	opts := strings.Join([]string{
		"-p " + strconv.Itoa(s.port), "-k " + s.dir, "-c listen_addresses=127.0.0.1",
		"-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off",
		"-c max_connections=300", "-c shared_buffers=32MB",
	}, " ")
	if err := s.run("pg_ctl", "-D", s.data(), "-o", opts, "-l", filepath.Join(s.dir, "log"),
		"-w", "-t", "60", "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
		return fmt.Errorf("%w\nserver log:\n%s", err, log)
	}
	s.running = true
	return nil
}

// Stop stops the server at once, as a crash would (pg_ctl stop -m
// immediate): no checkpoint; UNLOGGED tables are emptied at the next start.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return nil
	}
	s.running = false
	return s.run("pg_ctl", "-D", s.data(), "-m", "immediate", "-w", "stop")
}

// Close stops the server and removes its directory.
func (s *Server) Close() error {
	err := s.Stop()
	if rerr := os.RemoveAll(s.dir); err == nil {
		err = rerr
	}
	return err
}

// DSN returns a connection string to the server's postgres database.
func (s *Server) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// Port returns the server's port.
func (s *Server) Port() int { return s.port }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
