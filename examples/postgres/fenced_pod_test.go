package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/resilience"
)

// podEnv carries a pod's configuration (JSON) to this test binary when a
// test starts it as a pod process.
const podEnv = "HERDGUARD_PG_FENCED_POD"

// podConfig configures a pod: a pipeline with Redis and Lock (library
// defaults) whose loader writes report Key downstream, fenced.
type podConfig struct {
	Name  string `json:"name"`  // the pipeline
	Redis string `json:"redis"` // host:port
	DSN   string `json:"dsn"`
	Table string `json:"table"` // the reports table, created by the test
	Key   string `json:"key"`
	Value string `json:"value"` // what the pod's load computes
	// Hold makes the load wait, between reading its fence and its
	// downstream write, for a "write" line on stdin.
	Hold bool `json:"hold,omitempty"`
}

// podEvent is a line a pod prints on stdout: "ready" once its pipeline is
// built, "fence" when its load has read its grant's fence, "done" when
// its Get returned.
type podEvent struct {
	Ev         string `json:"ev"`
	Fence      int64  `json:"fence,omitempty"`
	Value      string `json:"value,omitempty"`
	Source     string `json:"source,omitempty"`
	Err        string `json:"err,omitempty"`
	Superseded bool   `json:"superseded,omitempty"` // the load's downstream write was refused
	Duplicates uint64 `json:"duplicates,omitempty"` // Stats().DuplicateLoads
}

func emit(ev podEvent) {
	b, _ := json.Marshal(ev)
	fmt.Println(string(b))
}

// podMain runs a pod: it prints "ready", waits for a "get" line, makes one
// Get of its key, prints "done", and exits when stdin closes.
func podMain(raw string) int {
	var c podConfig
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		fmt.Fprintln(os.Stderr, "pod:", err)
		return 2
	}
	if err := pod(c); err != nil {
		fmt.Fprintln(os.Stderr, "pod:", err)
		return 1
	}
	return 0
}

func pod(c podConfig) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, c.DSN)
	if err != nil {
		return err
	}
	defer pool.Close()
	rdb := redis.NewClient(&redis.Options{Addr: c.Redis})
	defer rdb.Close()
	p, err := resilience.New[string](c.Name).Cache(time.Minute).Redis(rdb).Lock(resilience.LockSettings{}).Build()
	if err != nil {
		return err
	}
	defer p.Close()

	// lines are stdin's; the reader ends when the parent closes it.
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	emit(podEvent{Ev: "ready"})
	if l := <-lines; l != "get" {
		return fmt.Errorf("got %q on stdin, want get", l)
	}
	var fence int64
	load := reports{db: pool, table: c.Table}.loader(func(ctx context.Context, _ int64) (string, error) {
		fence, _ = resilience.Fence(ctx, c.Key)
		emit(podEvent{Ev: "fence", Fence: fence})
		if c.Hold {
			select {
			case l := <-lines:
				if l != "write" {
					return "", fmt.Errorf("got %q on stdin, want write", l)
				}
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		return c.Value, nil
	})
	res, err := p.GetResult(ctx, c.Key, load)
	ev := podEvent{Ev: "done", Fence: fence, Value: res.Value, Source: res.Source.String(),
		Duplicates: p.Stats().DuplicateLoads}
	if err != nil {
		ev.Err, ev.Superseded = err.Error(), errors.Is(err, errSuperseded)
	}
	emit(ev)
	for range lines {
	}
	return nil
}
