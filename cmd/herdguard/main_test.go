package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/resilience"
)

// srv is the package's private redis-server, started by TestMain; tests use
// distinct pipeline names.
var srv *redistest.Server

// rdb is a client of srv, closed by srv's cleanup.
var rdb *redis.Client

func TestMain(m *testing.M) {
	redistest.Main(m, func(s *redistest.Server) { srv, rdb = s, s.Client() })
}

// cli runs the command line and returns its output and exit code.
func cli(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return out.String(), errOut.String(), code
}

// cliJSON runs the command line with -redis and -json added, wants exit
// code 0, and decodes its output into v.
func cliJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	args = append(args[:1:1], append([]string{"-redis", srv.Addr(), "-json"}, args[1:]...)...)
	out, errOut, code := cli(t, args...)
	if code != 0 {
		t.Fatalf("%q: exit %d, stderr %q", args, code, errOut)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("%q: %v in %q", args, err, out)
	}
}

// newPipeline builds a pipeline with Redis, a cache and the lock, and
// closes it at the end of t.
func newPipeline(t *testing.T, name string) *resilience.Pipeline[string] {
	t.Helper()
	p, err := resilience.New[string](name).Cache(time.Minute).NegativeTTL(time.Minute).
		Redis(rdb).Lock(resilience.LockSettings{}).Build()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// load returns a loader of v that counts its calls in n.
func load(v string, n *int) resilience.LoadFunc[string] {
	return func(context.Context, string) (string, error) {
		if n != nil {
			*n++
		}
		return v, nil
	}
}

// mustKeys returns the key space of pipeline name under the default
// prefix.
func mustKeys(t *testing.T, name string) rkey.Space {
	t.Helper()
	k, err := rkey.New("", name)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// hasRow reports whether text has a line reading row once runs of spaces
// are squeezed to one.
func hasRow(text, row string) bool {
	for line := range strings.Lines(text) {
		if strings.Join(strings.Fields(line), " ") == row {
			return true
		}
	}
	return false
}

// eventually polls cond until it holds or five seconds pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
	}
}

func TestRun_badInput(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		code     int
		inStderr string
	}{
		{"no command", nil, exitUsage, "usage: herdguard"},
		{"unknown command", []string{"peek"}, exitUsage, `unknown command "peek"`},
		{"missing pipeline", []string{"inspect", "k"}, exitUsage, "-pipeline is required"},
		{"missing key", []string{"inspect", "-pipeline", "p"}, exitUsage, "want exactly one KEY, got 0"},
		{"empty key", []string{"invalidate", "-pipeline", "p", ""}, exitUsage, "KEY is empty"},
		{"two keys", []string{"inspect", "-pipeline", "p", "a", "b"}, exitUsage, "got 2"},
		{"key where none is taken", []string{"locks", "-pipeline", "p", "a"}, exitUsage, "takes no KEY"},
		{"bad flag", []string{"subscribers", "-pipeline", "p", "-nope"}, exitUsage, "-nope"},
		{"brace in prefix", []string{"locks", "-pipeline", "p", "-prefix", "a{"}, exitUsage, "must not contain braces"},
		{"help", []string{"locks", "-h"}, exitOK, "-pipeline"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := cli(t, tt.args...)
			if code != tt.code || !strings.Contains(errOut, tt.inStderr) || out != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d and stderr with %q", code, out, errOut, tt.code, tt.inStderr)
			}
		})
	}
}

// TestRun_silentRedis: a server that accepts connections and never
// answers fails the command within its timeout.
func TestRun_silentRedis(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(conns.Wait)
	done := make(chan struct{})
	defer close(done)
	defer ln.Close()
	// The accept loop ends when ln closes; each connection is held open,
	// silent, until the test ends.
	conns.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() { <-done; _ = c.Close() })
		}
	})
	start := time.Now()
	_, errOut, code := cli(t, "inspect", "-redis", ln.Addr().String(), "-pipeline", "p", "-timeout", "300ms", "k")
	if code != exitFailure || !strings.Contains(errOut, "did not answer within 300ms") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v with -timeout 300ms", d)
	}
}

func TestRun_unreachableRedis(t *testing.T) {
	dead := redistest.Start(t)
	addr := dead.Addr()
	if err := dead.Stop(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, errOut, code := cli(t, "locks", "-redis", addr, "-pipeline", "p", "-timeout", "300ms")
	if code != exitFailure || !strings.Contains(errOut, "did not answer within 300ms") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v", d)
	}
}
