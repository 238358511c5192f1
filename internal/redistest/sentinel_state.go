package redistest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// MasterAddrs asks every sentinel which address it names as the master;
// a sentinel that does not answer yields "".
func (s *Sentinel) MasterAddrs(ctx context.Context) []string {
	out := make([]string, len(s.addrs))
	for i, a := range s.addrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a, MaxRetries: -1})
		hp, err := sc.GetMasterAddrByName(ctx, MasterName).Result()
		_ = sc.Close()
		if err == nil && len(hp) == 2 {
			out[i] = hp[0] + ":" + hp[1]
		}
	}
	return out
}

// WaitMaster waits until addr reports the master role and every sentinel
// names it as the master, or ctx ends.
func (s *Sentinel) WaitMaster(ctx context.Context, addr string) error {
	var last string
	for ctx.Err() == nil {
		role, err := infoField(ctx, addr, "replication", "role")
		names := s.MasterAddrs(ctx)
		agreed := err == nil && role == "master"
		for _, n := range names {
			agreed = agreed && n == addr
		}
		if agreed {
			return nil
		}
		last = fmt.Sprintf("%s role %q (%v), sentinels name %q", addr, role, err, names)
		sleep(ctx, 20*time.Millisecond)
	}
	return fmt.Errorf("redistest: %s not master: %s: %w", addr, last, ctx.Err())
}

// WaitReplicated waits until the replica has received every write the
// primary had made when WaitReplicated was called, or ctx ends.
func (s *Sentinel) WaitReplicated(ctx context.Context) error {
	want, err := infoField(ctx, s.primary.Addr(), "replication", "master_repl_offset")
	if err != nil {
		return fmt.Errorf("redistest: primary offset: %w", err)
	}
	w, err := strconv.ParseInt(want, 10, 64)
	if err != nil {
		return fmt.Errorf("redistest: primary offset %q: %w", want, err)
	}
	var last string
	for ctx.Err() == nil {
		link, _ := infoField(ctx, s.replica.Addr(), "replication", "master_link_status")
		got, err := infoField(ctx, s.replica.Addr(), "replication", "slave_repl_offset")
		if g, perr := strconv.ParseInt(got, 10, 64); err == nil && perr == nil && link == "up" && g >= w {
			return nil
		}
		last = fmt.Sprintf("link %q, offset %q of %d (%v)", link, got, w, err)
		sleep(ctx, 10*time.Millisecond)
	}
	return fmt.Errorf("redistest: replica not caught up: %s: %w", last, ctx.Err())
}

// infoField returns one field of one INFO section of the server at addr.
func infoField(ctx context.Context, addr, section, field string) (string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second,
		ReadTimeout: time.Second, WriteTimeout: time.Second})
	defer c.Close()
	info, err := c.Info(ctx, section).Result()
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("no %s in INFO %s", field, section)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func (s *Sentinel) logs() string {
	var b strings.Builder
	for _, srv := range []*Server{s.primary, s.replica} {
		if srv != nil {
			b.WriteString(srv.Log() + "\n")
		}
	}
	for _, p := range s.sentinels {
		b.WriteString(tail(p.logPath) + "\n")
	}
	return b.String()
}

// close kills every process, closes the clients and the proxy, and removes
// the sentinels' directories.
func (s *Sentinel) close() {
	s.clients.close()
	for _, p := range s.sentinels {
		_ = p.kill()
	}
	for _, srv := range []*Server{s.replica, s.primary} {
		if srv != nil {
			srv.close()
		}
	}
	if s.closeLink != nil {
		s.closeLink()
	}
	for _, d := range s.dirs {
		_ = os.RemoveAll(d)
	}
}
