package redistest

import (
	"bufio"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// proxyClient is a client of p that does not retry and waits at most
// timeout for a reply.
func proxyClient(t *testing.T, p *Proxy, timeout time.Duration) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, DialTimeout: 300 * time.Millisecond,
		ReadTimeout: timeout, WriteTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestProxy_cutRestore(t *testing.T) {
	s := Start(t)
	p := StartProxy(t, s.Addr())
	if p.Target() != s.Addr() {
		t.Fatalf("Target() = %s, want %s", p.Target(), s.Addr())
	}
	c := proxyClient(t, p, 300*time.Millisecond)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through the proxy: %v", err)
	}
	p.Cut()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING on a connection opened before Cut succeeded")
	}
	fresh := proxyClient(t, p, 300*time.Millisecond)
	if err := fresh.Ping(ctx).Err(); err == nil {
		t.Fatal("PING on a connection opened during the cut succeeded")
	}
	p.Restore()
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET after Restore = %q, %v; want v", got, err)
	}
	if err := fresh.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restore on the client cut off: %v", err)
	}
}

func TestProxy_delay(t *testing.T) {
	s := Start(t)
	p := StartProxy(t, s.Addr())
	c := proxyClient(t, p, 5*time.Second)
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	const d = 100 * time.Millisecond
	p.Delay(d)
	start := time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING with a delay: %v", err)
	}
	// The request and the reply are each held d.
	if took := time.Since(start); took < 2*d {
		t.Fatalf("PING took %v with a %v delay each way, want at least %v", took, d, 2*d)
	}
	p.Delay(0)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after the delay was removed: %v", err)
	}
}

func TestProxy_closeEndsConnections(t *testing.T) {
	s := Start(t)
	p, closeFn, err := NewProxy(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c := proxyClient(t, p, 300*time.Millisecond)
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	p.Cut()
	held := proxyClient(t, p, 300*time.Millisecond)
	errc := make(chan error, 1)
	go func() { errc <- held.Ping(ctx).Err() }()
	closeFn()
	closeFn() // twice is harmless
	if err := <-errc; err == nil {
		t.Fatal("PING through a closed proxy succeeded")
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING after the proxy closed succeeded")
	}
}

// pingConn writes a PING on c and reads the reply, waiting at most wait.
func pingConn(c net.Conn, wait time.Duration) (string, error) {
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return "", err
	}
	if err := c.SetReadDeadline(time.Now().Add(wait)); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return line, err
}

func TestProxy_blackhole(t *testing.T) {
	s := Start(t)
	p := StartProxy(t, s.Addr())
	dial := func() net.Conn {
		c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	old := dial()
	if got, err := pingConn(old, 5*time.Second); err != nil || got != "+PONG\r\n" {
		t.Fatalf("PING through the proxy = %q, %v", got, err)
	}
	p.Blackhole()
	silent := func(c net.Conn, what string) {
		t.Helper()
		// The write goes into the hole without an error; no reply comes,
		// yet the connection is not closed: the read times out.
		got, err := pingConn(c, 300*time.Millisecond)
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("PING on %s = %q, %v; want a read timeout on an open connection", what, got, err)
		}
	}
	silent(old, "a connection opened before Blackhole")
	during := dial()
	silent(during, "a connection opened in the black hole")
	p.Restore()
	silent(old, "a connection that fell into the hole, after Restore")
	silent(during, "a connection opened in the hole, after Restore")
	if got, err := pingConn(dial(), 5*time.Second); err != nil || got != "+PONG\r\n" {
		t.Fatalf("PING on a new connection after Restore = %q, %v", got, err)
	}
}
