package redistest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// replicatedNodeTimeout is the cluster-node-timeout of a cluster with
// replicas: how long a master may be silent before its replica takes over.
const replicatedNodeTimeout = 2 * time.Second

// StartReplicatedCluster starts a cluster of n masters (at least 3), each
// with one replica, for one test and registers its cleanup with tb. A
// master that dies is replaced by its replica after about two seconds
// (cluster-node-timeout) plus the election.
func StartReplicatedCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	return startCluster(tb, n, NewReplicatedCluster)
}

// NewReplicatedCluster starts a cluster of n masters (at least 3), each
// with one replica, without a testing.TB, and waits until every replica is
// in sync. The caller must call closeFn.
func NewReplicatedCluster(n int) (c *Cluster, closeFn func(), err error) {
	c, err = newCluster(n, 1, replicatedNodeTimeout)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), topologyTimeout)
	defer cancel()
	if err := c.waitReplicasUp(ctx); err != nil {
		c.close()
		return nil, nil, err
	}
	return c, c.close, nil
}

// waitReplicasUp waits until every node that is a replica has its link to
// its master up.
func (c *Cluster) waitReplicasUp(ctx context.Context) error {
	var last string
	for ctx.Err() == nil {
		last = ""
		replicas := 0
		for _, s := range c.nodes {
			role, err := infoField(ctx, s.Addr(), "replication", "role")
			if err != nil {
				last = fmt.Sprintf("%s: %v", s.Addr(), err)
				break
			}
			if role != "slave" {
				continue
			}
			replicas++
			if st, _ := infoField(ctx, s.Addr(), "replication", "master_link_status"); st != "up" {
				last = fmt.Sprintf("%s: master link %q", s.Addr(), st)
				break
			}
		}
		if last == "" && replicas == len(c.nodes)/2 {
			return nil
		}
		if last == "" {
			last = fmt.Sprintf("%d replicas, want %d", replicas, len(c.nodes)/2)
		}
		sleep(ctx, 20*time.Millisecond)
	}
	return fmt.Errorf("redistest: cluster replicas not in sync: %s\n%s", last, c.logs())
}

// SlotMaster returns the node that serves slot as master, as the live node
// at addr sees it.
func (c *Cluster) SlotMaster(ctx context.Context, addr string, slot int) (*Server, error) {
	rc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second,
		ReadTimeout: time.Second, WriteTimeout: time.Second})
	defer rc.Close()
	//lint:ignore SA1019 CLUSTER SLOTS answers on every Redis the tests may find; CLUSTER SHARDS needs 7.0
	slots, err := rc.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, err
	}
	for _, r := range slots {
		if slot < int(r.Start) || slot > int(r.End) || len(r.Nodes) == 0 {
			continue
		}
		for _, s := range c.nodes {
			if s.Addr() == r.Nodes[0].Addr {
				return s, nil
			}
		}
		return nil, fmt.Errorf("redistest: slot %d served by unknown node %s", slot, r.Nodes[0].Addr)
	}
	return nil, fmt.Errorf("redistest: slot %d not served", slot)
}

// WaitSlotMaster waits until every node other than old reports
// cluster_state:ok and names one same node other than old as slot's
// master, and returns that node.
func (c *Cluster) WaitSlotMaster(ctx context.Context, slot int, old *Server) (*Server, error) {
	var last string
	for ctx.Err() == nil {
		m, err := c.agreedSlotMaster(ctx, slot, old)
		if err == nil {
			return m, nil
		}
		last = err.Error()
		sleep(ctx, 20*time.Millisecond)
	}
	return nil, fmt.Errorf("redistest: slot %d has no new master: %s: %w", slot, last, ctx.Err())
}

func (c *Cluster) agreedSlotMaster(ctx context.Context, slot int, old *Server) (*Server, error) {
	var agreed *Server
	for _, s := range c.nodes {
		if s == old {
			continue
		}
		st, err := infoClusterState(ctx, s.Addr())
		if err != nil || st != "ok" {
			return nil, fmt.Errorf("%s: cluster_state %q (%v)", s.Addr(), st, err)
		}
		m, err := c.SlotMaster(ctx, s.Addr(), slot)
		switch {
		case err != nil:
			return nil, fmt.Errorf("%s: %v", s.Addr(), err)
		case m == old:
			return nil, fmt.Errorf("%s still names %s", s.Addr(), old.Addr())
		case agreed != nil && m != agreed:
			return nil, fmt.Errorf("nodes disagree: %s and %s", agreed.Addr(), m.Addr())
		}
		agreed = m
	}
	return agreed, nil
}

func infoClusterState(ctx context.Context, addr string) (string, error) {
	rc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second,
		ReadTimeout: time.Second, WriteTimeout: time.Second})
	defer rc.Close()
	info, err := rc.ClusterInfo(ctx).Result()
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cluster_state:"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("no cluster_state")
}
