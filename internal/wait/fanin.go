package wait

import (
	"reflect"
	"slices"
	"sync"
)

// FanIn passes the announcements of keys, heard on their subscriptions,
// on one channel: what a batch's wait hears its keys on (the Heard of its
// Sub). A goroutine per chunk keys selects over theirs. One select over
// every key would cost each wake-up the whole set, and reflect.Select
// refuses more than 65,536 cases. stop ends the goroutines.
func FanIn(keys []string, subs map[string]<-chan struct{}) (heard <-chan string, stop func()) {
	ch := make(chan string, min(len(keys), chunk))
	done := make(chan struct{})
	var wg sync.WaitGroup
	for part := range slices.Chunk(keys, chunk) {
		cases := make([]reflect.SelectCase, 0, 1+len(part))
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(done)})
		for _, k := range part {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(subs[k])})
		}
		wg.Go(func() {
			for {
				i, _, _ := reflect.Select(cases)
				if i == 0 {
					return
				}
				select {
				case ch <- part[i-1]:
				case <-done:
					return
				}
			}
		})
	}
	return ch, func() { close(done); wg.Wait() }
}

// chunk is how many keys' subscriptions one goroutine of FanIn selects
// over.
const chunk = 64

// drainHeard returns first (unless empty) and the keys heard now, once
// each, that keep accepts.
func drainHeard(heard <-chan string, first string, keep func(string) bool) []string {
	var woken []string
	seen := map[string]bool{}
	add := func(k string) {
		if !seen[k] && keep(k) {
			seen[k] = true
			woken = append(woken, k)
		}
	}
	if first != "" {
		add(first)
	}
	for {
		select {
		case k := <-heard:
			add(k)
		default:
			return woken
		}
	}
}
