package crosspod_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// load says how a get's loader behaves: it takes Sleep, or with Hold,
// waits for [fleet.finish].
type load struct {
	Sleep time.Duration
	Hold  bool
}

// held is a load that waits for the parent's finish.
var held = load{Hold: true}

// sleeping is a load that takes d.
func sleeping(d time.Duration) load { return load{Sleep: d} }

// call is a batch of concurrent callers that one get started.
type call struct {
	pod, id, callers int
	key              string
	sent             time.Time
}

func (f *fleet) pod(i int) *podProc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pods[i]
}

// send writes c to pod i's stdin.
func (f *fleet) send(i int, c command) error { return f.pod(i).proc.SendJSON(c) }

// get makes n callers in pod i call GetResult(key) at once, with loads
// behaving as ld.
func (f *fleet) get(i int, key string, n int, ld load) call {
	f.t.Helper()
	f.mu.Lock()
	f.nextID++
	id := f.nextID
	f.mu.Unlock()
	c := call{pod: i, id: id, callers: n, key: key, sent: time.Now()}
	if err := f.send(i, command{Op: "get", ID: id, Key: key, Callers: n, Sleep: ld.Sleep, Hold: ld.Hold}); err != nil {
		f.t.Fatalf("pod %d: send get %q: %v", i, key, err)
	}
	return c
}

// results waits up to d for every caller of c and returns their results.
// A pod that dies first, or callers that do not answer, fail the test.
func (f *fleet) results(c call, d time.Duration) []callResult {
	f.t.Helper()
	p := f.pod(c.pod)
	ok := f.waitFor(d, func() bool { return len(p.results[c.id]) >= c.callers || p.exited() })
	f.mu.Lock()
	rs := slices.Clone(p.results[c.id])
	f.mu.Unlock()
	switch {
	case len(rs) >= c.callers:
		return rs
	case !ok:
		f.t.Fatalf("pod %d: %d of %d callers of %q answered within %v", c.pod, len(rs), c.callers, c.key, d)
	default:
		f.t.Fatalf("pod %d exited with %d of %d callers of %q unanswered:\n%s", c.pod, len(rs), c.callers, c.key, f.stderrs())
	}
	return nil
}

// finish releases pod i's held loads of key, and its later ones.
func (f *fleet) finish(i int, key string) {
	f.t.Helper()
	if err := f.send(i, command{Op: "finish", Key: key}); err != nil {
		f.t.Fatalf("pod %d: send finish %q: %v", i, key, err)
	}
}

// finishAll releases the held loads of key in every live pod.
func (f *fleet) finishAll(key string) {
	f.t.Helper()
	for i := range f.len() {
		if !f.pod(i).exited() {
			f.finish(i, key)
		}
	}
}

// invalidate makes pod i call Invalidate(key) and returns its error.
func (f *fleet) invalidate(i int, key string) error {
	f.t.Helper()
	f.mu.Lock()
	f.nextID++
	id := f.nextID
	p := f.pods[i]
	f.mu.Unlock()
	if err := f.send(i, command{Op: "invalidate", ID: id, Key: key}); err != nil {
		f.t.Fatalf("pod %d: send invalidate: %v", i, err)
	}
	if !f.waitFor(time.Minute, func() bool { _, ok := p.dones[id]; return ok || p.exited() }) {
		f.t.Fatalf("pod %d: invalidate %q did not return", i, key)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	msg, ok := p.dones[id]
	switch {
	case !ok:
		return errors.New("pod exited")
	case msg != "":
		return errors.New(msg)
	}
	return nil
}

// kill ends pod i with SIGKILL, waits until it is reaped, and returns
// when the signal was sent.
func (f *fleet) kill(i int) time.Time {
	f.t.Helper()
	at := time.Now()
	if err := f.pod(i).proc.Kill(exitBound); err != nil {
		f.t.Fatal(err)
	}
	return at
}

// cut breaks pod i's link to Redis (its own proxy).
func (f *fleet) cut(i int) time.Time {
	f.t.Helper()
	p := f.pod(i)
	if p.proxy == nil {
		f.t.Fatalf("pod %d has no proxy to cut", i)
	}
	at := time.Now()
	p.proxy.Cut()
	return at
}

// restore mends pod i's link to Redis.
func (f *fleet) restore(i int) { f.pod(i).proxy.Restore() }

func (f *fleet) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pods)
}

// loadsOf returns the loads of key begun so far.
func (f *fleet) loadsOf(key string) []loadEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []loadEvent
	for _, l := range f.loads {
		if l.Key == key {
			out = append(out, l)
		}
	}
	return out
}

// loadCount returns how many loads (of any key) have begun.
func (f *fleet) loadCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.loads)
}

// waitLoad waits up to d for a load of key that is the from-th load or
// later, and returns the first such.
func (f *fleet) waitLoad(key string, from int, d time.Duration) (loadEvent, bool) {
	var got loadEvent
	ok := f.waitFor(d, func() bool {
		for _, l := range f.loads[min(from, len(f.loads)):] {
			if l.Key == key {
				got = l
				return true
			}
		}
		return false
	})
	return got, ok
}

// scriptCount returns how many scripts pod i has run.
func (f *fleet) scriptCount(i int) int {
	p := f.pod(i)
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(p.scripts)
}

// waitScript waits up to d until pod i has run a script on one of key's
// Redis keys (the from-th script of the pod or later) and Redis answered
// it without error: for a pod that found the key cold, its attempt to take
// the lock.
func (f *fleet) waitScript(i int, key string, from int, d time.Duration) bool {
	p := f.pod(i)
	base := f.keys().Base(key)
	return f.waitFor(d, func() bool {
		for _, s := range p.scripts[min(from, len(p.scripts)):] {
			if strings.HasPrefix(s.Key, base) && s.Err == "" {
				return true
			}
		}
		return p.exited()
	})
}

// waitDone waits up to d until every caller of c has answered, or c's pod
// has run a script whose first key is redisKey (its from-th script or
// later).
func (f *fleet) waitDone(c call, redisKey string, from int, d time.Duration) bool {
	p := f.pod(c.pod)
	return f.waitFor(d, func() bool {
		if len(p.results[c.id]) >= c.callers || p.exited() {
			return true
		}
		for _, s := range p.scripts[min(from, len(p.scripts)):] {
			if s.Key == redisKey {
				return true
			}
		}
		return false
	})
}

// scriptErrors summarizes pod i's scripts on key's Redis keys that Redis
// answered with an error: each distinct error once, with its count.
func (f *fleet) scriptErrors(i int, key string) string {
	p := f.pod(i)
	base := f.keys().Base(key)
	f.mu.Lock()
	defer f.mu.Unlock()
	counts := map[string]int{}
	var order []string
	for _, s := range p.scripts {
		if !strings.HasPrefix(s.Key, base) || s.Err == "" {
			continue
		}
		if counts[s.Err] == 0 {
			order = append(order, s.Err)
		}
		counts[s.Err]++
	}
	if len(order) == 0 {
		return "none"
	}
	var parts []string
	for _, e := range order {
		parts = append(parts, fmt.Sprintf("%dx %q", counts[e], e))
	}
	return strings.Join(parts, "; ")
}

// breakers returns pod i's breaker transitions, "name:from>to".
func (f *fleet) breakers(i int) []string {
	p := f.pod(i)
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(p.breakers)
}
