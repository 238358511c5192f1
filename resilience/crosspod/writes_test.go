package crosspod_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/herdguard/herdguard/internal/redistest"
)

// writesTTL is the pods' Cache ttl in the write tests, and so their L1
// TTL: long enough that only an announcement (or a re-subscription) can
// take a value out of a pod's L1 within a test.
const writesTTL = 30 * time.Second

func (f *fleet) newID() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	return f.nextID
}

// other waits up to d for the event of kind ev with id and returns it.
func (f *fleet) other(ev string, id int, d time.Duration) event {
	f.t.Helper()
	var got event
	ok := f.waitFor(d, func() bool {
		for _, e := range f.others {
			if e.Ev == ev && e.ID == id {
				got = e
				return true
			}
		}
		return false
	})
	if !ok {
		f.t.Fatalf("no %q event for op %d within %v:\n%s", ev, id, d, f.stderrs())
	}
	return got
}

// written makes pod i Set (op "set") or Invalidate (op "inval") key and
// returns when the call began and when it returned, in the pod.
func (f *fleet) written(i int, op, key, value string) (began, returned time.Time) {
	f.t.Helper()
	id := f.newID()
	if err := f.send(i, command{Op: op, ID: id, Key: key, Value: value}); err != nil {
		f.t.Fatal(err)
	}
	ev := f.other("written", id, stepBound)
	if ev.Err != "" {
		f.t.Fatalf("pod %d: %s %q: %s", i, op, key, ev.Err)
	}
	return time.Unix(0, ev.FromNS), time.Unix(0, ev.AtNS)
}

// watch makes pod i watch keys until each stops serving its old value,
// and returns the watch's id once the pod has seen every key hold it.
func (f *fleet) watch(i int, keys, olds []string) int {
	f.t.Helper()
	id := f.newID()
	if err := f.send(i, command{Op: "watch", ID: id, Keys: keys, Values: olds}); err != nil {
		f.t.Fatal(err)
	}
	if ev := f.other("watching", id, stepBound); ev.Err != "" {
		f.t.Fatalf("pod %d: key %q %s", i, ev.Key, ev.Err)
	}
	return id
}

// gone waits up to d for watch id's n "gone" events and returns when each
// key stopped being served.
func (f *fleet) gone(id, n int, d time.Duration) map[string]time.Time {
	f.t.Helper()
	out := map[string]time.Time{}
	f.waitFor(d, func() bool {
		clear(out)
		for _, e := range f.others {
			if e.Ev == "gone" && e.ID == id {
				if e.Err != "" {
					return true
				}
				out[e.Key] = time.Unix(0, e.AtNS)
			}
		}
		return len(out) >= n
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.others {
		if e.Ev == "gone" && e.ID == id && e.Err != "" {
			f.t.Fatalf("pod %d: key %q %s", e.Pod, e.Key, e.Err)
		}
	}
	if len(out) < n {
		f.t.Fatalf("watch %d: %d of %d keys stopped being served within %v", id, len(out), n, d)
	}
	return out
}

// peek makes pod i Peek key and returns the value ("" for none).
func (f *fleet) peek(i int, key string) string {
	f.t.Helper()
	id := f.newID()
	if err := f.send(i, command{Op: "peek", ID: id, Key: key}); err != nil {
		f.t.Fatal(err)
	}
	ev := f.other("peeked", id, stepBound)
	if ev.Err != "" {
		f.t.Fatalf("pod %d: peek %q: %s", i, key, ev.Err)
	}
	return ev.Value
}

// get1 is one caller's Get of key in pod i, whose load (if any) takes no
// time; an error fails the test.
func (f *fleet) get1(i int, key string) callResult {
	f.t.Helper()
	r := f.results(f.get(i, key, 1, sleeping(0)), resultBound)[0]
	if r.Err != "" {
		f.t.Fatalf("pod %d: get %q: %s", i, key, r.Err)
	}
	return r
}

// fill loads each key once (in pod 0) and has every other pod read it
// into its L1; it returns the values.
func (f *fleet) fill(keys []string) []string {
	f.t.Helper()
	olds := make([]string, len(keys))
	for j, k := range keys {
		olds[j] = f.get1(0, k).Value
	}
	for i := 1; i < f.len(); i++ {
		for j, k := range keys {
			if r := f.get1(i, k); r.Value != olds[j] || r.Source != "l2" {
				f.t.Fatalf("pod %d: %q = %s from %s, want %s from l2", i, k, r.Value, r.Source, olds[j])
			}
		}
	}
	return olds
}

// afterWrite checks that every pod's next Get of key returns what the
// write left: the Set value, or after an Invalidate, a value loaded after
// it began (began: when the call began). A load that begins during the
// call (woken by the revoked lock's announcement, say) reads what the
// writer wrote before calling Invalidate; one from before must be gone.
func (f *fleet) afterWrite(op, key, setValue string, began time.Time) {
	f.t.Helper()
	for i := range f.len() {
		r := f.get1(i, key)
		if op == "set" {
			if r.Value != setValue {
				f.t.Fatalf("pod %d after Set(%q): %s from %s, want %s", i, key, r.Value, r.Source, setValue)
			}
			continue
		}
		lv, err := parseValue(r.Value)
		if err != nil {
			f.t.Fatal(err)
		}
		if !lv.Start.After(began) {
			f.t.Fatalf("pod %d after Invalidate(%q): %s from %s, loaded before the Invalidate began", i, key, r.Value, r.Source)
		}
	}
}

func percentiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return fmt.Sprintf("p50=%v p99=%v max=%v (n=%d)", at(0.50).Round(time.Microsecond), at(0.99).Round(time.Microsecond), s[len(s)-1].Round(time.Microsecond), len(s))
}

// TestWrites_reachEveryPod: four pods hold keys in their L1 (TTL 30 s);
// pod 0 invalidates or sets them, one at a time; pods 1-3 stop serving
// the old values, each measured from when pod 0's call returned to when
// the watching pod's Peek no longer returned the old value. Then every
// pod's next Get returns the new value, and an invalidated key is loaded
// once more across the four pods.
func TestWrites_reachEveryPod(t *testing.T) {
	const (
		pods   = 4
		nkeys  = 25
		rounds = 4
	)
	srv, admin := startRedis(t)
	specs := make([]podSpec, pods)
	for i := range specs {
		specs[i] = podSpec{TTL: writesTTL}
	}
	f := startFleet(t, newName("writes"), target{Addr: srv.Addr()}, specs...)
	ctx, cancel := context.WithTimeout(context.Background(), resultBound)
	defer cancel()
	f.waitSubscribed(ctx, admin, pods)

	delays := map[string][]time.Duration{}
	early := 0 // drops seen before the writer's call returned
	for r := range rounds {
		op := []string{"inval", "set"}[r%2]
		keys := make([]string, nkeys)
		for j := range keys {
			keys[j] = fmt.Sprintf("r%d-k%d", r, j)
		}
		olds := f.fill(keys)
		var ids []int
		for i := 1; i < pods; i++ {
			ids = append(ids, f.watch(i, keys, olds))
		}
		wrote, began := map[string]time.Time{}, map[string]time.Time{}
		for _, k := range keys {
			began[k], wrote[k] = f.written(0, op, k, "set:"+k)
		}
		for _, id := range ids {
			for k, at := range f.gone(id, nkeys, time.Minute) {
				d := at.Sub(wrote[k])
				if d < 0 {
					early++
					d = 0
				}
				delays[op] = append(delays[op], d)
			}
		}
		for _, k := range keys {
			f.afterWrite(op, k, "set:"+k, began[k])
		}
		if op == "inval" {
			for _, k := range keys {
				if n := len(f.loadsOf(k)); n != 2 {
					t.Fatalf("%q: %d loads, want 2 (before and after the Invalidate): %v", k, n, describeAll(f.loadsOf(k)))
				}
			}
		}
	}
	t.Logf("FIGURES L1 propagation, %d pods, L1 TTL %v, %d keys x %d rounds, from the writer's return to the last old answer on each other pod: Invalidate %s; Set %s; %d dropped before the writer's call returned",
		pods, writesTTL, nkeys, rounds, percentiles(delays["inval"]), percentiles(delays["set"]), early)
	f.checkHistory(consistency{L1TTL: writesTTL})
}

// TestWrites_loadInFlightCannotWriteBack: pod 1's load (holding the
// lock) read its value before pod 0's Invalidate or Set; once it
// finishes, its value is nowhere: every pod's next Get returns what the
// write left.
func TestWrites_loadInFlightCannotWriteBack(t *testing.T) {
	const pods = 4
	srv, admin := startRedis(t)
	specs := make([]podSpec, pods)
	for i := range specs {
		specs[i] = podSpec{TTL: writesTTL}
	}
	f := startFleet(t, newName("inflight"), target{Addr: srv.Addr()}, specs...)
	ctx, cancel := context.WithTimeout(context.Background(), resultBound)
	defer cancel()
	f.waitSubscribed(ctx, admin, pods)

	for _, op := range []string{"inval", "set"} {
		key := "busy-" + op
		c := f.get(1, key, callersPerPod, held)
		l, ok := f.waitLoad(key, 0, stepBound)
		if !ok || l.Pod != 1 {
			t.Fatalf("%s: pod 1's load did not begin: %+v", op, l)
		}
		// Waiters in the other pods.
		var waiters []call
		for i := 2; i < pods; i++ {
			waiters = append(waiters, f.get(i, key, callersPerPod, held))
		}
		began, _ := f.written(0, op, key, "set:"+key)
		f.finishAll(key)
		if rs := tallyOf(f.results(c, resultBound)); rs.errCount > 0 {
			t.Fatalf("%s: pod 1's callers: %v", op, rs)
		}
		for _, w := range waiters {
			if rs := tallyOf(f.results(w, resultBound)); rs.errCount > 0 || rs.values[l.Value] > 0 {
				t.Fatalf("%s: waiters in pod %d got the value loaded before the write: %v", op, w.pod, rs)
			}
		}
		f.afterWrite(op, key, "set:"+key, began)
		t.Logf("%s: %d loads: %v", op, len(f.loadsOf(key)), describeAll(f.loadsOf(key)))
	}
	f.checkHistory(consistency{L1TTL: writesTTL})
}

// TestWrites_cutPodDropsL1OnReconnect: pod 3's link to Redis is cut
// while pod 0 invalidates a key every pod holds. Pod 3 cannot hear it and
// serves its L1 copy meanwhile; once the link is back and its
// subscription confirmed again, it drops its L1.
func TestWrites_cutPodDropsL1OnReconnect(t *testing.T) {
	linkFaultDropsL1(t, "cut", (*redistest.Proxy).Cut, time.Minute)
}

// TestWrites_blackholedPodDropsL1OnHeal is the same with pod 3's link
// black-holed instead: its connections stay open and carry nothing, so
// only the notifier's liveness check finds its subscription dead. Once
// the link heals, pod 3 subscribes again on a new connection within
// seconds (rlock.NotifierDeadAfter, then a backoff of at most a second)
// and drops its L1, long before the copy's L1TTL would have ended it.
func TestWrites_blackholedPodDropsL1OnHeal(t *testing.T) {
	linkFaultDropsL1(t, "hole", (*redistest.Proxy).Blackhole, writesTTL/2)
}

// linkFaultDropsL1 faults pod 3's link while pod 0 invalidates a key
// every pod holds, checks that pod 3 serves its L1 copies meanwhile, and
// that within bound of the link's return it dropped its whole L1.
func linkFaultDropsL1(t *testing.T, name string, fault func(*redistest.Proxy), bound time.Duration) {
	const pods = 4
	srv, admin := startRedis(t)
	specs := make([]podSpec, pods)
	for i := range specs {
		specs[i] = podSpec{TTL: writesTTL, Proxy: i == pods-1}
	}
	f := startFleet(t, newName(name), target{Addr: srv.Addr()}, specs...)
	ctx, cancel := context.WithTimeout(context.Background(), resultBound)
	defer cancel()
	f.waitSubscribed(ctx, admin, pods)
	keys := []string{name + "-a", name + "-b"}
	olds := f.fill(keys)
	link := f.pod(pods - 1).proxy
	watch := f.watch(1, keys[:1], olds[:1])
	faultAt := time.Now()
	fault(link)
	began, _ := f.written(0, "inval", keys[0], "")
	f.gone(watch, 1, time.Minute) // a pod with its link heard it
	// Pod 3 heard nothing: its L1 still answers with the old values.
	time.Sleep(200 * time.Millisecond)
	for j, k := range keys {
		if v := f.peek(pods-1, k); v != olds[j] {
			t.Fatalf("pod %d with its link faulted (%s): %q = %q, want its L1 copy %s", pods-1, name, k, v, olds[j])
		}
		// A Get too, for the history: a stale answer the model allows
		// only in an outage.
		if r := f.get1(pods-1, k); r.Value != olds[j] || r.Source != "l1" {
			t.Fatalf("pod %d with its link faulted (%s): Get(%q) = %+v, want its L1 copy %s", pods-1, name, k, r, olds[j])
		}
	}
	// The invalidated key: its L1 copy goes when the subscription is
	// back (the other key's stays valid in Redis, so a Peek still
	// returns it).
	id := f.watch(pods-1, keys[:1], olds[:1])
	restored := time.Now()
	link.Restore()
	d := f.gone(id, 1, time.Minute)[keys[0]].Sub(restored)
	healed := time.Now()
	if d > bound {
		t.Fatalf("pod %d served the invalidated key %v after its link (%s) was restored, want within %v", pods-1, d.Round(time.Millisecond), name, bound)
	}
	f.afterWrite("inval", keys[0], "", began)
	if r := f.get1(pods-1, keys[1]); r.Value != olds[1] || r.Source != "l2" {
		t.Fatalf("pod %d after re-subscribing: %q = %+v, want %s read again from l2", pods-1, keys[1], r, olds[1])
	}
	t.Logf("FIGURES link %s during an Invalidate: the faulted pod stopped serving the invalidated key %v after the link was restored (and had dropped its whole L1)", name, d.Round(time.Millisecond))
	f.checkHistory(consistency{L1TTL: writesTTL, Outages: []outage{{Pods: []int{pods - 1}, From: faultAt, To: healed}}})
}

// TestWrites_redisRestartDropsL1: Redis restarts (losing its data); every
// pod re-subscribes and drops its L1, so none serves a value Redis no
// longer has, nor misses a write made meanwhile.
func TestWrites_redisRestartDropsL1(t *testing.T) {
	const pods = 4
	srv, admin := startRedis(t)
	specs := make([]podSpec, pods)
	for i := range specs {
		specs[i] = podSpec{TTL: writesTTL}
	}
	f := startFleet(t, newName("restart"), target{Addr: srv.Addr()}, specs...)
	ctx, cancel := context.WithTimeout(context.Background(), resultBound)
	defer cancel()
	f.waitSubscribed(ctx, admin, pods)
	keys := []string{"rs-a", "rs-b"}
	olds := f.fill(keys)
	var ids []int
	for i := range pods {
		ids = append(ids, f.watch(i, keys, olds))
	}
	down := time.Now()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	var ds []time.Duration
	for _, id := range ids {
		for _, at := range f.gone(id, len(keys), time.Minute) {
			ds = append(ds, at.Sub(restarted))
		}
	}
	dropped := time.Now()
	for i := range pods {
		if r := f.get1(i, keys[0]); r.Source == "l1" && r.Value == olds[0] {
			t.Fatalf("pod %d serves its pre-restart L1 copy", i)
		}
	}
	t.Logf("FIGURES Redis restart: every pod dropped its L1 after re-subscribing, %s after the restart returned", percentiles(ds))
	f.checkHistory(consistency{L1TTL: writesTTL, Outages: []outage{{From: down, To: dropped}}})
}
