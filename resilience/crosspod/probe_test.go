package crosspod_test

import (
	"fmt"
	"time"
)

// probeBound bounds how long Redis may take to serve a pod again after a
// fault: a restart, a breaker's open time or a failover take seconds.
const probeBound = time.Minute

// probe makes pod i load fresh keys (named by keyFor, one call each)
// until a call runs through L2 and the lock without failing open, and
// returns when that call was made; ok is false if none did within
// probeBound. It shows that the pod's client and Redis breaker serve
// again, so that what follows tests the lock, not a failing link.
func (f *fleet) probe(i int, keyFor func(n int) string) (at time.Time, ok bool) {
	f.t.Helper()
	deadline := time.Now().Add(probeBound)
	for n := 0; time.Now().Before(deadline); n++ {
		c := f.get(i, keyFor(n), 1, sleeping(time.Millisecond))
		r := f.results(c, probeBound)[0]
		if r.Err == "" && !r.FailedOpen && r.Source == "loader" {
			return c.sent, true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Time{}, false
}

// probeKeys names probe keys for pod i: probe-<tag>-<pod>-<n>.
func probeKeys(tag string, i int) func(int) string {
	return func(n int) string { return fmt.Sprintf("probe-%s-%d-%d", tag, i, n) }
}

// watch runs wait on its own goroutine and returns a function that waits
// for it and says when it returned.
func watch(wait func() error) func() (time.Time, error) {
	type done struct {
		at  time.Time
		err error
	}
	ch := make(chan done, 1)
	go func() {
		err := wait()
		ch <- done{time.Now(), err}
	}()
	return func() (time.Time, error) {
		d := <-ch
		return d.at, d.err
	}
}
