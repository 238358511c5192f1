package crosspod_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/resilience"
)

// podTrips counts the round trips of a pod's client: each command sent
// alone, and each pipeline, once; a new connection's handshake does not
// count.
var podTrips = &tripHook{}

type tripHook struct{ n atomic.Int64 }

func (h *tripHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *tripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake(cmd) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *tripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && !handshake(cmds[0]) {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

func handshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}

// getMany makes one GetMany call of c.Keys. Its loader reports each key it
// loads as a load event whose value carries the call's sequence number in
// the pod (all keys of one loader call share it), then takes c.Sleep. Each
// key's result is a result event; then a batch event says how many round
// trips the pod's client made meanwhile (Value) and how long the call took.
func (p *pod) getMany(c command) {
	p.calls.Go(func() {
		ctx, cancel := context.WithTimeout(p.ctx, callTimeout)
		defer cancel()
		load := func(ctx context.Context, keys []string) (map[string]string, error) {
			start := time.Now()
			seq := p.seq.Add(1)
			out := make(map[string]string, len(keys))
			for _, k := range keys {
				v := formatValue(k, p.cfg.Pod, seq, start)
				p.em.Emit(event{Ev: "load", Pod: p.cfg.Pod, Key: k, Value: v})
				out[k] = v
			}
			t := time.NewTimer(c.Sleep)
			defer t.Stop()
			select {
			case <-t.C:
				return out, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		trips := podTrips.n.Load()
		t0 := time.Now()
		rs, err := p.pipe.GetMany(ctx, c.Keys, load)
		took := time.Since(t0)
		trips = podTrips.n.Load() - trips
		var ke resilience.KeyErrors
		errors.As(err, &ke)
		for _, k := range c.Keys {
			r := rs[k]
			ev := event{Ev: "result", Pod: p.cfg.Pod, ID: c.ID, Key: k, Value: r.Value,
				Source: r.Source.String(), FailedOpen: r.FailedOpen, LatencyUS: took.Microseconds()}
			switch {
			case ke[k] != nil:
				ev.Err = ke[k].Error()
			case rs == nil && err != nil:
				ev.Err = err.Error()
			}
			p.em.Emit(ev)
		}
		p.em.Emit(event{Ev: "batch", Pod: p.cfg.Pod, ID: c.ID, Value: strconv.FormatInt(trips, 10), LatencyUS: took.Microseconds()})
	})
}

// getMany makes pod i call GetMany(keys) once, its loader taking sleep.
func (f *fleet) getMany(i int, keys []string, sleep time.Duration) call {
	f.t.Helper()
	f.mu.Lock()
	f.nextID++
	id := f.nextID
	f.mu.Unlock()
	c := call{pod: i, id: id, callers: len(keys), key: "(batch)", sent: time.Now()}
	if err := f.send(i, command{Op: "getmany", ID: id, Keys: keys, Sleep: sleep}); err != nil {
		f.t.Fatalf("pod %d: send getmany: %v", i, err)
	}
	return c
}

// batch returns the summary of pod c.pod's GetMany call c: its round trips
// and its latency.
func (f *fleet) batch(c call) (trips int64, took time.Duration) {
	f.t.Helper()
	p := f.pod(c.pod)
	if !f.waitFor(resultBound, func() bool { _, ok := p.batches[c.id]; return ok || p.exited() }) {
		f.t.Fatalf("pod %d: no summary of its batch", c.pod)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ev, ok := p.batches[c.id]
	if !ok {
		f.t.Fatalf("pod %d exited before its batch's summary", c.pod)
	}
	n, _ := strconv.ParseInt(ev.Value, 10, 64)
	return n, time.Duration(ev.LatencyUS) * time.Microsecond
}

// TestGetMany_acrossPods: four pods, each a process of its own, ask the
// same 1,000 keys at once, 900 of them in Redis already and 100 cold.
// Every cold key is loaded once across the pods, each pod calls its batch
// loader at most once per batch, and every caller gets, for every key, the
// value in Redis or the one load's. Three rounds, each with 100 new cold
// keys; the warm keys are L1 hits from the second round on.
func TestGetMany_acrossPods(t *testing.T) {
	const (
		pods     = 4
		warm     = 900
		cold     = 100
		rounds   = 3
		loadTime = 50 * time.Millisecond
	)
	srv, admin := startRedis(t)
	specs := make([]podSpec, pods)
	f := startFleet(t, newName("many"), target{Addr: srv.Addr()}, specs...)
	ctx, cancel := context.WithTimeout(context.Background(), resultBound)
	defer cancel()
	f.waitSubscribed(ctx, admin, pods)

	// The warm keys, written to Redis as a pipeline would.
	l2, err := rcache.NewRedis[string](admin, rcache.RedisOptions{Namespace: f.name})
	if err != nil {
		t.Fatal(err)
	}
	warmKeys := make([]string, warm)
	writes := make([]rcache.Write[string], warm)
	now := time.Now()
	for i := range warmKeys {
		warmKeys[i] = fmt.Sprintf("w%04d", i)
		writes[i] = rcache.Write[string]{Key: warmKeys[i], Entry: rcache.Entry[string]{
			Value: "warm:" + warmKeys[i], Written: now, Expires: now.Add(time.Hour), StaleUntil: now.Add(time.Hour)}}
	}
	ws, err := l2.SetMany(ctx, writes)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.Err != nil || !w.Stored {
			t.Fatalf("warm write: %+v", w)
		}
	}

	for round := range rounds {
		keys := slices.Clone(warmKeys)
		coldKeys := make([]string, cold)
		for i := range coldKeys {
			coldKeys[i] = fmt.Sprintf("c%d-%03d", round, i)
		}
		// The cold keys spread among the warm ones.
		for i, k := range coldKeys {
			at := i * (len(keys) + 1) / cold
			keys = slices.Insert(keys, at, k)
		}
		from := f.loadCount()
		calls := make([]call, pods)
		for i := range pods {
			calls[i] = f.getMany(i, keys, loadTime)
		}
		var rs [][]callResult
		for _, c := range calls {
			rs = append(rs, f.results(c, resultBound))
		}
		all := tallyOf(rs...)
		if all.errCount > 0 || all.failedOpen > 0 {
			t.Fatalf("round %d: %v", round, all)
		}
		f.mu.Lock()
		loads := slices.Clone(f.loads[from:])
		f.mu.Unlock()
		perKey := map[string]int{}
		loaderCalls := map[int]map[int64]bool{}
		loaded := map[string]string{}
		for _, l := range loads {
			perKey[l.Key]++
			loaded[l.Key] = l.Value
			v, err := parseValue(l.Value)
			if err != nil {
				t.Fatal(err)
			}
			if loaderCalls[l.Pod] == nil {
				loaderCalls[l.Pod] = map[int64]bool{}
			}
			loaderCalls[l.Pod][v.Seq] = true
		}
		twice := 0
		for _, n := range perKey {
			if n > 1 {
				twice++
			}
		}
		if len(perKey) != cold || twice > 0 {
			t.Errorf("round %d: %d keys loaded (want %d), %d of them more than once", round, len(perKey), cold, twice)
		}
		for _, k := range coldKeys {
			if perKey[k] != 1 {
				t.Errorf("round %d: cold key %s loaded %d times", round, k, perKey[k])
			}
		}
		maxCalls := 0
		for pod, seqs := range loaderCalls {
			maxCalls = max(maxCalls, len(seqs))
			if len(seqs) > 1 {
				t.Errorf("round %d: pod %d called its loader %d times in one batch", round, pod, len(seqs))
			}
		}
		// Every caller got every key's one value.
		for _, set := range rs {
			for _, r := range set {
				if r.Value == "" {
					t.Fatalf("round %d: pod %d: an empty value: %+v", round, r.Pod, r)
				}
			}
			for _, r := range set {
				lv, err := parseValue(r.Value)
				if err != nil { // a warm value
					continue
				}
				if loaded[lv.Key] != r.Value {
					t.Errorf("round %d: pod %d got %s for %s, not its one load %s", round, r.Pod, r.Value, lv.Key, loaded[lv.Key])
				}
			}
		}
		var trips []int64
		var tooks []time.Duration
		for _, c := range calls {
			n, took := f.batch(c)
			trips = append(trips, n)
			tooks = append(tooks, took.Round(100*time.Microsecond))
		}
		t.Logf("FIGURES GetMany across pods, round %d: %d pods x 1,000 keys (%d cold), loader %v: %d keys loaded, %d twice; loader calls per pod at most %d (%d pods loaded); Redis round trips per pod's batch %v; batch latency %v; sources %v",
			round, pods, cold, loadTime, len(perKey), twice, maxCalls, len(loaderCalls), trips, tooks, all.sources)
	}
}
