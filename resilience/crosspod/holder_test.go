package crosspod_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/herdguard/herdguard/resilience"
)

const (
	// callersPerPod is how many goroutines of each pod call at once.
	callersPerPod = 16
	// podLoadTime is how long a load takes in the holder tests.
	podLoadTime = 2 * time.Second
	// faultAfter is how far into the holder's load the fault comes.
	faultAfter = 300 * time.Millisecond
	// stepBound bounds a step that takes milliseconds (a pod trying the
	// lock, a load beginning): only a hang exceeds it.
	stepBound = 30 * time.Second
	// resultBound bounds a call that may wait out MaxWait (30 s by
	// default) and then load: only a hang exceeds it.
	resultBound = 2 * time.Minute
)

// TestHolderGone_oneTakeover checks, with the default lock settings, that
// when the lock's holder dies (SIGKILL) or loses its link to Redis 300 ms
// into its load, exactly one waiter in another pod takes the lock over and
// loads, every caller of the other pods gets that load's value, no caller
// errors, and the takeover comes before the dead holder's lease (30 s)
// runs out. With the link cut, the holder, reconnected and finishing after
// the takeover, must not write its value back; its own callers may get
// its value.
func TestHolderGone_oneTakeover(t *testing.T) {
	for _, tc := range []struct {
		pods int
		cut  bool
	}{{4, false}, {8, false}, {4, true}, {8, true}} {
		fault := "killed"
		if tc.cut {
			fault = "cut"
		}
		t.Run(fmt.Sprintf("%s/%dpods", fault, tc.pods), func(t *testing.T) {
			testHolderGone(t, tc.pods, tc.cut)
		})
	}
}

func testHolderGone(t *testing.T, pods int, cut bool) {
	srv, admin := startRedis(t)
	name := newName("holder")
	specs := make([]podSpec, pods) // the default lock settings
	for i := range specs {
		specs[i].Proxy = cut
		if cut {
			// Loads are held until the test finishes them, which may be
			// past the loader's default 10 s timeout.
			specs[i].LoadTimeout = resultBound
		}
	}
	f := startFleet(t, name, target{Addr: srv.Addr()}, specs...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f.waitSubscribed(ctx, admin, pods)

	const key = "hot"
	// Pod 0 takes the lock; its load lasts until the fault.
	holderCall := f.get(0, key, callersPerPod, held)
	first, ok := f.waitLoad(key, 0, stepBound)
	if !ok || first.Pod != 0 {
		t.Fatalf("pod 0 did not begin the first load within %v (got %+v)", stepBound, first)
	}
	// Every other pod finds the key locked and waits. With the link cut,
	// their loads wait for the test, so that it can look at Redis between
	// the holder's return and the takeover's write.
	ld := sleeping(podLoadTime)
	if cut {
		ld = held
	}
	var calls []call
	for i := 1; i < pods; i++ {
		calls = append(calls, f.get(i, key, callersPerPod, ld))
	}
	for i := 1; i < pods; i++ {
		if !f.waitScript(i, key, 0, stepBound) {
			t.Fatalf("pod %d did not try the lock within %v", i, stepBound)
		}
	}
	time.Sleep(time.Until(first.At.Add(faultAfter)))
	before := f.loadCount()
	var faultAt time.Time
	if cut {
		faultAt = f.cut(0)
	} else {
		faultAt = f.kill(0)
	}

	var holderResults []callResult
	var outages []outage
	if cut {
		restoreHolder(ctx, t, f, admin, key, before, holderCall)
		f.finishAll(key)
		outages = []outage{{Pods: []int{0}, From: faultAt, To: time.Now()}}
	}
	var waiters []callResult
	for _, c := range calls {
		waiters = append(waiters, f.results(c, resultBound)...)
	}
	if cut {
		holderResults = f.results(holderCall, resultBound)
	}

	loads := f.loadsOf(key)
	if len(loads) < 2 {
		t.Fatalf("no load after the holder was %s, yet every waiter answered: %v", faultName(cut), tallyOf(waiters))
	}
	takeover := loads[1]
	delay := takeover.At.Sub(faultAt)
	t.Logf("FIGURES holder %s %v into its load, %d pods x %d callers, default lock settings: takeover load began %v after the fault (pod %d); waiters' max latency %v",
		faultName(cut), faultAfter, pods, callersPerPod, delay.Round(time.Millisecond), takeover.Pod,
		tallyOf(waiters).maxLatency.Round(time.Millisecond))
	if len(loads) != 2 {
		t.Errorf("%d loads of the key after the holder was %s, want exactly one (a waiter's): all loads: %v",
			len(loads)-1, faultName(cut), describeAll(loads))
	}
	if takeover.Pod == 0 || takeover.Index < before {
		t.Errorf("the second load came from %s, want a waiter's after the fault", describe(takeover))
	}
	if limit := first.At.Add(resilience.DefaultLockLease); !takeover.At.Before(limit) {
		t.Errorf("takeover began %v after the holder's grant: only when its lease (%v) ran out, not when it stopped beating",
			takeover.At.Sub(first.At).Round(time.Millisecond), resilience.DefaultLockLease)
	}
	w := tallyOf(waiters)
	if !w.only(takeover.Value) || w.failedOpen > 0 {
		t.Errorf("waiters: want every caller to get %s, none failed open: %v", takeover.Value, w)
	}
	if w.sources["loader"] != 1 {
		t.Errorf("waiters: %d callers with source loader, want 1: %v", w.sources["loader"], w)
	}
	if h := tallyOf(holderResults); h.errCount > 0 {
		t.Errorf("holder's callers: %v", h)
	}
	// The living pods counted the takeover's load, and nothing else: the
	// cut-off holder's refused write-back is not a load.
	var dups uint64
	for i := range pods {
		if cut || i != 0 {
			dups += f.duplicateLoads(i)
		}
	}
	if dups != uint64(len(loads)-1) {
		t.Errorf("DuplicateLoads = %d across the pods, want %d: the loads past the holder's", dups, len(loads)-1)
	}
	f.checkHistory(consistency{L1TTL: time.Minute, Outages: outages})
	if v, ok, err := l2Value(ctx, admin, name, key); err != nil || !ok || v != takeover.Value {
		t.Errorf("L2 holds %q (hit %v, %v) after the takeover, want %s", v, ok, err, takeover.Value)
	}
}

// restoreHolder waits for the takeover load while pod 0's link is cut,
// restores the link, lets pod 0's load finish, and checks that pod 0,
// whose lease was taken over, did not write its value back. Pod 0 is done
// with its value when its callers have answered or it has run a script on
// the value key (a write-back, refused or not); the takeover's own load is
// still held then, so L2 must hold no value.
func restoreHolder(ctx context.Context, t *testing.T, f *fleet, admin l2Reader, key string, before int, holderCall call) {
	t.Helper()
	bound := resilience.DefaultLockMaxWait + stepBound
	tk, ok := f.waitLoad(key, before, bound)
	if !ok {
		t.Fatalf("no takeover load within %v of cutting the holder off", bound)
	}
	f.restore(0)
	from := f.scriptCount(0)
	f.finish(0, key)
	if !f.waitDone(holderCall, f.keys().Value(key), from, stepBound) {
		t.Logf("pod 0 neither answered nor wrote within %v of finishing its load", stepBound)
	}
	holderValue := ""
	for _, l := range f.loadsOf(key) {
		if l.Pod == 0 {
			holderValue = l.Value
		}
	}
	if v, ok, err := l2Value(ctx, admin, f.name, key); err != nil || ok {
		t.Errorf("after the takeover by %s, while its load still runs, L2 holds %q (%v): want nothing; the cut-off holder's value is %s",
			describe(tk), v, err, holderValue)
	}
}

func faultName(cut bool) string {
	if cut {
		return "cut off"
	}
	return "SIGKILLed"
}
