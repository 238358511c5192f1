package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// MasterName is the name under which a [Sentinel] topology's sentinels
// monitor its primary.
const MasterName = "herdguard"

// Sentinel timings: a primary that does not answer for sentinelDownAfter is
// failed over. sentinelFailoverTimeout is long on purpose: Sentinel repoints
// a replica that replicates from another address than the primary's (ours
// replicates through a [Proxy]) only after it, and retries a failed
// election only after twice it.
const (
	sentinelDownAfter       = time.Second
	sentinelFailoverTimeout = time.Minute
	sentinelCount           = 3
	sentinelQuorum          = 2
	// topologyTimeout bounds how long a topology may take to form.
	topologyTimeout = 30 * time.Second
)

// Sentinel is a Redis Sentinel topology on free loopback ports: a primary,
// one replica that replicates through a [Proxy] (so a test can keep writes
// from reaching it), and three sentinels monitoring the primary as
// [MasterName] with quorum 2, failing it over after one second without an
// answer. Its methods are safe for concurrent use.
type Sentinel struct {
	primary, replica *Server
	link             *Proxy
	closeLink        func()
	sentinels        []*process
	addrs            []string
	dirs             []string

	clients clients[*redis.Client]
}

// StartSentinel starts a Sentinel topology for one test and registers its
// cleanup with tb.
func StartSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	return start(tb, NewSentinel, func(s *Sentinel) string { return "sentinel topology:\n" + s.logs() })
}

// NewSentinel starts a Sentinel topology without a testing.TB and waits
// until every sentinel knows the replica and the other sentinels. The
// caller must call closeFn, which kills every process and closes the
// clients handed out by [Sentinel.FailoverClient].
func NewSentinel() (s *Sentinel, closeFn func(), err error) {
	s = &Sentinel{}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if s.primary, err = newServer(nil); err != nil {
		return nil, nil, err
	}
	if s.link, s.closeLink, err = NewProxy(s.primary.Addr()); err != nil {
		return nil, nil, err
	}
	_, linkPort, err := net.SplitHostPort(s.link.Addr())
	if err != nil {
		return nil, nil, err
	}
	s.replica, err = newServer(func(int, string) ([]string, error) {
		return []string{"--replicaof", "127.0.0.1", linkPort}, nil
	})
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), topologyTimeout)
	defer cancel()
	if err := s.WaitReplicated(ctx); err != nil {
		return nil, nil, err
	}
	for range sentinelCount {
		if err := s.startSentinel(); err != nil {
			return nil, nil, err
		}
	}
	if err := s.waitFormed(ctx); err != nil {
		return nil, nil, fmt.Errorf("%w\n%s", err, s.logs())
	}
	return s, s.close, nil
}

// startSentinel starts one sentinel on a free port, retrying a port lost
// to another process.
func (s *Sentinel) startSentinel() error {
	bin, err := lookPath("redis-server")
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "redistest-sentinel-")
	if err != nil {
		return fmt.Errorf("redistest: temp dir: %w", err)
	}
	s.dirs = append(s.dirs, dir)
	host, port := "127.0.0.1", s.primary.port
	conf := fmt.Sprintf("sentinel monitor %s %s %d %d\n"+
		"sentinel down-after-milliseconds %s %d\n"+
		"sentinel failover-timeout %s %d\n"+
		"sentinel parallel-syncs %s 1\n",
		MasterName, host, port, sentinelQuorum,
		MasterName, sentinelDownAfter.Milliseconds(),
		MasterName, sentinelFailoverTimeout.Milliseconds(),
		MasterName)
	var last error
	for range portAttempts {
		p, err := freePort()
		if err != nil {
			last = err
			continue
		}
		path := filepath.Join(dir, "sentinel-"+strconv.Itoa(p)+".conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			return fmt.Errorf("redistest: sentinel config: %w", err)
		}
		addr := "127.0.0.1:" + strconv.Itoa(p)
		proc, err := spawn(bin, filepath.Join(dir, "sentinel-"+strconv.Itoa(p)+".log"), []string{
			path, "--sentinel", "--port", strconv.Itoa(p), "--bind", "127.0.0.1",
			"--dir", dir, "--daemonize", "no", "--logfile", "",
		})
		if err != nil {
			return err
		}
		if err = proc.waitReady(addr); err == nil {
			s.sentinels = append(s.sentinels, proc)
			s.addrs = append(s.addrs, addr)
			return nil
		}
		_ = proc.kill()
		last = err
		if !errors.Is(err, errExited) || !proc.bindFailed() {
			break
		}
	}
	return last
}

// waitFormed waits until every sentinel monitors the primary, knows the
// replica and knows the other sentinels.
func (s *Sentinel) waitFormed(ctx context.Context) error {
	var last error
	for ctx.Err() == nil {
		if last = s.checkFormed(ctx); last == nil {
			return nil
		}
		sleep(ctx, 50*time.Millisecond)
	}
	return fmt.Errorf("redistest: sentinel topology did not form: %v", last)
}

func (s *Sentinel) checkFormed(ctx context.Context) error {
	for _, a := range s.addrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a, MaxRetries: -1})
		m, err := sc.Master(ctx, MasterName).Result()
		_ = sc.Close()
		switch {
		case err != nil:
			return fmt.Errorf("%s: %w", a, err)
		case m["num-slaves"] != "1":
			return fmt.Errorf("%s knows %s replicas, want 1", a, m["num-slaves"])
		case m["num-other-sentinels"] != strconv.Itoa(sentinelCount-1):
			return fmt.Errorf("%s knows %s other sentinels, want %d", a, m["num-other-sentinels"], sentinelCount-1)
		}
	}
	return nil
}

// MasterName returns the name the sentinels monitor the primary under.
func (s *Sentinel) MasterName() string { return MasterName }

// Addrs returns the sentinels' host:port addresses.
func (s *Sentinel) Addrs() []string { return append([]string(nil), s.addrs...) }

// Primary returns the server that was primary at the start, to kill or
// pause it.
func (s *Sentinel) Primary() *Server { return s.primary }

// Replica returns the server that was the replica at the start.
func (s *Sentinel) Replica() *Server { return s.replica }

// ReplicationLink returns the proxy the replica replicates through: Cut it
// to keep writes from reaching the replica.
func (s *Sentinel) ReplicationLink() *Proxy { return s.link }

// FailoverClient returns a new go-redis Sentinel-backed client; the
// topology's cleanup closes it. Each opt may adjust the options before the
// client is built (master name and sentinel addresses are already set).
func (s *Sentinel) FailoverClient(opts ...func(*redis.FailoverOptions)) *redis.Client {
	o := &redis.FailoverOptions{MasterName: MasterName, SentinelAddrs: s.Addrs()}
	for _, f := range opts {
		f(o)
	}
	return s.clients.add(redis.NewFailoverClient(o))
}
