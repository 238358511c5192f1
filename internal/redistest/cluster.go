package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of private masters without replicas. Its
// methods are safe for concurrent use.
type Cluster struct {
	nodes []*Server

	clients clients[*redis.ClusterClient]
}

// StartCluster starts a cluster of n masters (at least 3) for one test and
// registers its cleanup with tb. It fails tb if the cluster cannot form.
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	return startCluster(tb, n, NewCluster)
}

// startCluster starts a cluster with newFn for one test and registers its
// cleanup with tb, which quotes the nodes' logs if the test failed.
func startCluster(tb testing.TB, n int, newFn func(int) (*Cluster, func(), error)) *Cluster {
	tb.Helper()
	return start(tb, func() (*Cluster, func(), error) { return newFn(n) },
		func(c *Cluster) string { return fmt.Sprintf("redis cluster %v:\n%s", c.Addrs(), c.logs()) })
}

// NewCluster starts a cluster of n masters (at least 3) without a
// testing.TB, for TestMain. The caller must call closeFn, which kills every
// node and closes the clients handed out by [Cluster.Client].
func NewCluster(n int) (c *Cluster, closeFn func(), err error) {
	c, err = newCluster(n, 0, 5*time.Second)
	if err != nil {
		return nil, nil, err
	}
	return c, c.close, nil
}

// newCluster starts n masters (at least 3), each with replicas replicas,
// whose cluster-node-timeout is nodeTimeout, joins them and waits until
// every node reports the cluster ok. On failure it stops what it started.
func newCluster(n, replicas int, nodeTimeout time.Duration) (c *Cluster, err error) {
	if n < 3 {
		return nil, fmt.Errorf("redistest: a cluster needs at least 3 masters, got %d", n)
	}
	cli, err := lookPath("redis-cli")
	if err != nil {
		return nil, err
	}
	c = &Cluster{}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	for range n * (1 + replicas) {
		s, err := newServer(clusterArgs(nodeTimeout))
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), topologyTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redistest: redis-cli --cluster create: %w\n%s\n%s", err, out, c.logs())
	}
	if err := c.waitOK(); err != nil {
		return nil, err
	}
	return c, nil
}

// clusterArgs enables cluster mode with its own bus port, so that the bus
// port (by default port+10000) cannot collide or overflow, and nodeTimeout
// as cluster-node-timeout.
func clusterArgs(nodeTimeout time.Duration) func(int, string) ([]string, error) {
	return func(_ int, dir string) ([]string, error) {
		bus, err := freePort()
		if err != nil {
			return nil, err
		}
		return []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes-"+strconv.Itoa(bus)+".conf"),
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
		}, nil
	}
}

// waitOK waits until every node reports cluster_state:ok and a cluster
// client can reach every master.
func (c *Cluster) waitOK() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		if last = c.checkOK(ctx); last == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("redistest: cluster not ready: %v\n%s", last, c.logs())
}

func (c *Cluster) checkOK(ctx context.Context) error {
	for _, s := range c.nodes {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		info, err := rc.ClusterInfo(ctx).Result()
		_ = rc.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", s.Addr(), err)
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return fmt.Errorf("%s: cluster_state is not ok", s.Addr())
		}
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), MaxRedirects: 0})
	defer cc.Close()
	return cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		return m.Ping(ctx).Err()
	})
}

// Addrs returns the host:port of every node.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Nodes returns the cluster's servers, to kill or pause one.
func (c *Cluster) Nodes() []*Server { return append([]*Server(nil), c.nodes...) }

// Client returns a new cluster client; the cluster's cleanup closes it.
// Each opt may adjust the options before the client is built (the
// addresses are already set).
func (c *Cluster) Client(opts ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	o := &redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true}
	for _, f := range opts {
		f(o)
	}
	return c.clients.add(redis.NewClusterClient(o))
}

func (c *Cluster) logs() string {
	parts := make([]string, 0, len(c.nodes))
	for _, s := range c.nodes {
		parts = append(parts, s.Log())
	}
	return strings.Join(parts, "\n")
}

// close kills every node and closes the clients.
func (c *Cluster) close() {
	c.clients.close()
	for _, s := range c.nodes {
		s.close()
	}
}
