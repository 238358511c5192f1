package resilience

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/rkey"
)

// clusterCall is one call of the traffic during a failover.
type clusterCall struct {
	start time.Time
	r     Result[string]
	err   error
}

// clusterTraffic is a stream of calls for the keys of one slot, from
// several callers, as a pod's would make them.
type clusterTraffic struct {
	keys []string
	n    atomic.Int64 // calls made; the next key is keys[n%len(keys)]

	mu    sync.Mutex // guards calls
	calls []clusterCall
}

// slotKeys returns n cache keys of pipeline ks whose Redis keys hash to
// slot, or to one same slot while slot is -1 (it then returns it): k<i>,
// from i = from on (one key in 16384 fits a slot, so the search ends).
func slotKeys(ks rkey.Space, slot *int, from *int, n int) []string {
	var keys []string
	for ; len(keys) < n; *from++ {
		k := fmt.Sprintf("k%d", *from)
		if s := redistest.KeySlot(ks.Value(k)); *slot < 0 || s == *slot {
			*slot = s
			keys = append(keys, k)
		}
	}
	return keys
}

// TestCluster_failover_defaultClient_locksAgain checks a Redis Cluster
// failover with go-redis's default cluster client (only Addrs set): the
// master of a key's slot is SIGKILLed while a holder loads the key, and
// its replica is promoted, while callers go on calling for keys of that
// slot. Calls made from two seconds after the promotion on load under
// the lock again and write L2, without a lowered
// ClusterStateReloadInterval, and with the Redis breaker's defaults.
func TestCluster_failover_defaultClient_locksAgain(t *testing.T) {
	const interval, callers = 100 * time.Millisecond, 16
	// The clients' pools dial a dead node's address once a second until
	// they are closed: after the cluster's cleanup has closed them, wait
	// for those dials to end.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := goleak.Find(ignore)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Error(err)
				return
			}
		}
	})
	cl := redistest.StartReplicatedCluster(t, 3)
	client := cl.Client(func(o *redis.ClusterOptions) { *o = redis.ClusterOptions{Addrs: o.Addrs} })
	name := redistest.Namespace(t)
	brs := &transitions{}
	// L1TTL of 1ms: each call goes to Redis, as calls on many pods would.
	p := build(t, New[string](name).Cache(time.Minute).L1TTL(time.Millisecond).
		Redis(client).Lock(LockSettings{}).OnBreakerChange(brs.observe))
	ks, err := rkey.New(DefaultPrefix, name)
	if err != nil {
		t.Fatal(err)
	}
	ctx := redistest.Context(t, 2*time.Minute)
	slot, from := -1, 0
	heldKey := slotKeys(ks, &slot, &from, 1)[0]
	tr := &clusterTraffic{keys: slotKeys(ks, &slot, &from, 32)}
	after := slotKeys(ks, &slot, &from, 3)
	load := func(_ context.Context, key string) (string, error) { return "v:" + key, nil }
	if r, err := p.GetResult(ctx, tr.keys[0], load); err != nil || r.FailedOpen || r.Source != SourceLoader {
		t.Fatalf("healthy cluster: %+v %v", r, err)
	}

	// A holder loads a key of the slot when its master dies.
	granted, finish := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		_, err := p.GetResult(ctx, heldKey, func(_ context.Context, key string) (string, error) {
			close(granted)
			<-finish
			return "v:" + key, nil
		})
		held <- err
	}()
	<-granted
	old, err := cl.SlotMaster(ctx, cl.Addrs()[0], slot)
	if err != nil {
		t.Fatal(err)
	}
	killAt := time.Now()
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	close(finish)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() { tr.run(ctx, p, interval, stop) })
	}
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop); wg.Wait() }) }
	defer halt()

	promoted, err := cl.WaitSlotMaster(ctx, slot, old)
	if err != nil {
		t.Fatal(err)
	}
	promotedAt := time.Now()
	if err := <-held; err != nil {
		t.Errorf("the holder's call: %v", err)
	}
	// The bound under test: two seconds after the promotion.
	select {
	case <-time.After(time.Until(promotedAt.Add(2 * time.Second))):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	direct := promoted.Client()
	for _, key := range after {
		at := time.Since(promotedAt).Round(time.Millisecond)
		r, err := p.GetResult(ctx, key, load)
		if err != nil || r.FailedOpen || r.Source != SourceLoader || r.Value != "v:"+key {
			t.Errorf("call for %s %v after the promotion: %+v %v, want a load under the lock", key, at, r, err)
			continue
		}
		if n, err := direct.Exists(ctx, ks.Value(key)).Result(); err != nil || n != 1 {
			t.Errorf("value of %s not in L2 on the new master: %d %v", key, n, err)
		}
	}
	halt()

	var backAt time.Time
	failedOpen := 0
	for _, c := range tr.calls {
		if c.r.FailedOpen {
			failedOpen++
		} else if c.err == nil && c.r.Source != SourceL1 && c.start.After(promotedAt) && (backAt.IsZero() || c.start.Before(backAt)) {
			backAt = c.start
		}
	}
	t.Logf("FIGURES cluster failover, default client: replica promoted %v after the kill; calls served by Redis again %v after the promotion; %d of %d calls failed open; Redis breaker: %s",
		promotedAt.Sub(killAt).Round(time.Millisecond), backAt.Sub(promotedAt).Round(time.Millisecond), failedOpen, len(tr.calls),
		since(brs, killAt))
}

// run makes one call every interval until stop is closed.
func (tr *clusterTraffic) run(ctx context.Context, p *Pipeline[string], interval time.Duration, stop <-chan struct{}) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	load := func(_ context.Context, key string) (string, error) { return "v:" + key, nil }
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		c := clusterCall{start: time.Now()}
		key := tr.keys[int(tr.n.Add(1))%len(tr.keys)]
		c.r, c.err = p.GetResult(ctx, key, load)
		tr.mu.Lock()
		tr.calls = append(tr.calls, c)
		tr.mu.Unlock()
	}
}

// since lists tr's transitions with their times after t0.
func since(tr *transitions, t0 time.Time) string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var b strings.Builder
	for _, x := range tr.list {
		fmt.Fprintf(&b, "%s>%s at %v; ", x.from, x.to, x.at.Sub(t0).Round(time.Millisecond))
	}
	return b.String()
}
