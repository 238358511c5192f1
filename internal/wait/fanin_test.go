package wait

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestFanIn_moreKeysThanOneSelectTakes: GetMany's wait hears the
// announcements of 70,000 keys (more than the 65,536 cases reflect.Select
// takes at once, which made such a wait panic) on one channel, each key
// heard as often as it is announced, and stop ends its goroutines.
func TestFanIn_moreKeysThanOneSelectTakes(t *testing.T) {
	const n = 70_000
	keys := make([]string, n)
	chans := make(map[string]chan struct{}, n)
	subs := make(map[string]<-chan struct{}, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
		ch := make(chan struct{}, 1)
		chans[keys[i]], subs[keys[i]] = ch, ch
	}
	heard, stop := FanIn(keys, subs)
	defer stop()
	announce := []string{"k0", "k65535", "k65536", "k69999"}
	var got []string
	for round := range 2 {
		for _, k := range announce {
			chans[k] <- struct{}{}
		}
		for len(got) < (round+1)*len(announce) {
			select {
			case k := <-heard:
				got = append(got, k)
			case <-time.After(10 * time.Second):
				t.Fatalf("heard %v, want %v twice", got, announce)
			}
		}
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(append(slices.Clone(announce), announce...)))
	if !slices.Equal(got, want) {
		t.Errorf("heard %v, want %v", got, want)
	}
}
