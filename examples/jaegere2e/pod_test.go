package jaegere2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/examples/internal/otelsetup"
	"github.com/herdguard/herdguard/resilience"
)

// The environment of a pod process.
const (
	podEnv      = "HG_E2E_POD"     // the pod's name; set only in pods
	redisEnv    = "HG_E2E_REDIS"   // host:port of the shared Redis
	modeEnv     = "HG_E2E_MODE"    // "stampede" or "failopen"
	keyEnv      = "HG_E2E_KEY"     // the key every caller asks for
	callersEnv  = "HG_E2E_CALLERS" // concurrent callers in the pod
	podsEnv     = "HG_E2E_PODS"    // pods the barrier waits for
	barrierName = "hg-e2e:barrier" // Redis key of the start barrier
	startedName = "hg-e2e:started" // Redis key counting the callers that have asked
)

// podReport is what a pod prints on stdout, as JSON.
type podReport struct {
	Pod        string         `json:"pod"`
	Sources    map[string]int `json:"sources"`
	FailedOpen int            `json:"failed_open"`
	Loads      int64          `json:"loads"`
	Errors     []string       `json:"errors"`
}

// runPod is one process of the fleet: it installs the OTLP exporter from
// the environment, builds the pipeline on the shared Redis, waits for
// every pod at the barrier, runs its callers at once and reports.
func runPod() int {
	rep, err := pod()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pod:", err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		return 1
	}
	return 0
}

func pod() (*podReport, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	shutdown, err := otelsetup.Install(ctx, "herdguard-e2e")
	if err != nil {
		return nil, err
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = shutdown(sctx)
	}()
	name := os.Getenv(podEnv)
	callers, _ := strconv.Atoi(os.Getenv(callersEnv))
	pods, _ := strconv.Atoi(os.Getenv(podsEnv))
	client := redis.NewClient(&redis.Options{Addr: os.Getenv(redisEnv)})
	defer client.Close()
	p, err := resilience.New[string]("e2e").
		Cache(time.Minute).
		Lock(resilience.LockSettings{MaxWait: 20 * time.Second}).
		Redis(client).
		RedisOptions(resilience.RedisOptions{OpTimeout: 300 * time.Millisecond}).
		Build()
	if err != nil {
		return nil, err
	}
	defer p.Close()

	stampede := os.Getenv(modeEnv) == "stampede"
	var loads atomic.Int64
	load := func(ctx context.Context, key string) (string, error) {
		loads.Add(1)
		if stampede {
			// The load lasts until every caller of every pod has asked,
			// and half a second more: between asking and joining this
			// pod's flight or the lock wait, a caller has only a few
			// lines and two Redis round trips to go.
			if err := waitCount(ctx, client, startedName, pods*callers); err != nil {
				return "", err
			}
		}
		select { // a slow query: every caller piles up behind it
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return "report for " + key, nil
	}
	if stampede {
		if err := client.Incr(ctx, barrierName).Err(); err != nil {
			return nil, err
		}
		if err := waitCount(ctx, client, barrierName, pods); err != nil {
			return nil, err
		}
	}
	rep := &podReport{Pod: name, Sources: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if stampede {
				if err := client.Incr(ctx, startedName).Err(); err != nil {
					mu.Lock()
					rep.Errors = append(rep.Errors, err.Error())
					mu.Unlock()
					return
				}
			}
			r, err := p.GetResult(ctx, os.Getenv(keyEnv), load)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				rep.Errors = append(rep.Errors, err.Error())
				return
			}
			rep.Sources[r.Source.String()]++
			if r.FailedOpen {
				rep.FailedOpen++
			}
		}()
	}
	wg.Wait()
	rep.Loads = loads.Load()
	return rep, nil
}

// waitCount waits until the counter at key reaches n: every pod at the
// start barrier, or every caller asking.
func waitCount(ctx context.Context, c *redis.Client, key string, n int) error {
	for {
		got, err := c.Get(ctx, key).Int()
		if err != nil && err != redis.Nil {
			return err
		}
		if got >= n {
			return nil
		}
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("%s: %d of %d: %w", key, got, n, ctx.Err())
		}
	}
}
