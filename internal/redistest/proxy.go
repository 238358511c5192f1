package redistest

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// proxyDialTimeout bounds the proxy's dial to its target.
const proxyDialTimeout = time.Second

// Proxy is a TCP proxy on a free loopback port in front of one server: a
// network link that a test can cut, black-hole, restore and slow down.
// Give each client (each pod) its own Proxy to fault that client's link
// alone.
//
// While the link is cut, the proxy holds new connections open without
// forwarding a byte (the dial succeeds, no reply ever comes), as a
// partitioned network does. While it is black-holed (see
// [Proxy.Blackhole]), even the open connections stay open and carry
// nothing. Its methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex // guards the fields below
	cut    bool
	black  bool // see Blackhole
	delay  time.Duration
	links  map[*link]struct{} // forwarding connections
	held   map[net.Conn]struct{}
	closed bool

	done chan struct{}  // closed by close, to stop delayed writes
	wg   sync.WaitGroup // the accept loop and every pump
}

// link is one forwarded connection: the client's side and the target's.
type link struct {
	client, server net.Conn
	once           sync.Once
	// dead is set when the link fell into a black hole: its pumps read
	// and drop every byte from then on.
	dead atomic.Bool
}

func (l *link) close() {
	l.once.Do(func() {
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// StartProxy starts a proxy in front of target for one test and registers
// its cleanup with tb.
func StartProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	p, closeFn, err := NewProxy(target)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(closeFn)
	return p
}

// NewProxy starts a proxy in front of target (host:port) without a
// testing.TB. The caller must call closeFn, which closes every connection
// and waits for the proxy's goroutines.
func NewProxy(target string) (p *Proxy, closeFn func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("redistest: proxy listen: %w", err)
	}
	p = &Proxy{
		ln: ln, target: target,
		links: map[*link]struct{}{}, held: map[net.Conn]struct{}{},
		done: make(chan struct{}),
	}
	p.wg.Add(1)
	// The accept loop ends when close closes the listener.
	go p.accept()
	return p, p.close, nil
}

// Addr returns the proxy's host:port, for clients to dial instead of the
// target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Cut breaks the link: it closes every forwarded connection and holds new
// ones silent until [Proxy.Restore].
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	links := p.links
	p.links = map[*link]struct{}{}
	p.mu.Unlock()
	for l := range links {
		l.close()
	}
}

// Blackhole makes the link drop every byte, in each direction, without
// closing anything: the connections open now stay open and silent for
// good (as when a firewall or NAT on the path lost its state, which
// neither end hears of), and new connections are accepted, reach the
// target, and carry nothing either, until [Proxy.Restore]. Only a client
// that checks its connections for liveness (a read timeout, a ping it
// expects an answer to) finds out; writes into the hole succeed.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.black = true
	for l := range p.links {
		l.dead.Store(true)
	}
}

// Restore mends the link: connections held during a cut are closed (so
// that their clients notice and dial again) and new ones are forwarded.
// Connections that fell into a black hole stay silent until their client
// closes them: only a new connection carries bytes again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut, p.black = false, false
	held := p.held
	p.held = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range held {
		_ = c.Close()
	}
}

// Delay holds every chunk of data d before forwarding it, in each
// direction, from now on; 0 removes the delay.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // the listener was closed
		}
		p.mu.Lock()
		switch {
		case p.closed:
			p.mu.Unlock()
			_ = c.Close()
			return
		case p.cut:
			p.held[c] = struct{}{}
			p.mu.Unlock()
			continue
		}
		p.mu.Unlock()
		p.connect(c)
	}
}

// connect dials the target for client c and starts the two pumps.
func (p *Proxy) connect(c net.Conn) {
	s, err := net.DialTimeout("tcp", p.target, proxyDialTimeout)
	if err != nil {
		_ = c.Close()
		return
	}
	l := &link{client: c, server: s}
	p.mu.Lock()
	if p.closed || p.cut { // cut while dialling: drop the connection
		p.mu.Unlock()
		l.close()
		return
	}
	l.dead.Store(p.black)
	p.links[l] = struct{}{}
	p.wg.Add(2)
	p.mu.Unlock()
	// Each pump ends when either side closes; it then closes both, which
	// ends the other pump.
	go p.pump(l, l.server, l.client)
	go p.pump(l, l.client, l.server)
}

// pump copies from src to dst, holding each chunk for the current delay,
// and drops what it reads once the link is dead.
func (p *Proxy) pump(l *link, dst io.Writer, src io.Reader) {
	defer p.wg.Done()
	defer p.forget(l)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !l.dead.Load() {
			if !p.wait() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// wait sleeps for the current delay; it reports false if the proxy closed
// meanwhile.
func (p *Proxy) wait() bool {
	p.mu.Lock()
	d := p.delay
	p.mu.Unlock()
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.done:
		return false
	}
}

func (p *Proxy) forget(l *link) {
	l.close()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// close stops the proxy: the listener, every connection, every goroutine.
func (p *Proxy) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.done)
	links, held := p.links, p.held
	p.links, p.held = map[*link]struct{}{}, map[net.Conn]struct{}{}
	p.mu.Unlock()
	_ = p.ln.Close()
	for l := range links {
		l.close()
	}
	for c := range held {
		_ = c.Close()
	}
	p.wg.Wait()
}
