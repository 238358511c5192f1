package resilience

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/herdguard/herdguard/internal/presence"
	"github.com/herdguard/herdguard/internal/redistest"
)

// A pod with Lock that holds no copy of the keys it reads, beside a pod
// that wrote them to Redis, soon reads each with one plain HGET instead of
// the look script; a run of cold keys then soon goes straight to the
// script again, so that a cold key's winner sends the look and the commit
// and nothing more.
func TestLockedPath_noL1Copy_plainReadOnceLooksFindValues(t *testing.T) {
	s := redistest.Start(t)
	writer := build(t, New[string]("warm").Cache(time.Hour).Redis(s.Client()).Lock(LockSettings{}))
	rdb := s.Client()
	log := &cmdLog{}
	rdb.AddHook(log)
	reader := build(t, New[string]("warm").Cache(time.Hour).Redis(rdb).Lock(LockSettings{}))
	ctx := context.Background()
	c := &counter{}
	const warm = 100
	for i := range warm {
		if _, err := writer.Get(ctx, fmt.Sprint("k", i), c.load); err != nil {
			t.Fatal(err)
		}
	}
	// The reader's first look loads the script and opens the connection.
	if _, err := reader.Get(ctx, "first", c.load); err != nil {
		t.Fatal(err)
	}

	scripts := 0
	for i := range warm {
		log.take()
		r, err := reader.GetResult(ctx, fmt.Sprint("k", i), c.load)
		if err != nil || r.Source != SourceL2 {
			t.Fatalf("k%d: %+v, %v; want an L2 hit", i, r, err)
		}
		got := log.take()
		switch {
		case slices.Equal(got, []string{"evalsha"}):
			scripts++
			if i >= presence.On+1 {
				t.Fatalf("k%d, after %d looks that found their value, sent the look script; want one HGET", i, i)
			}
		case !slices.Equal(got, []string{"hget"}):
			t.Fatalf("k%d sent %q, want one HGET or the look script", i, got)
		}
	}
	if scripts == warm {
		t.Fatalf("every L2 hit sent the look script; want plain reads once most looks find their value")
	}

	const cold = 20
	plainFirst := 0
	for i := range cold {
		log.take()
		r, err := reader.GetResult(ctx, fmt.Sprint("cold", i), c.load)
		if err != nil || r.Source != SourceLoader {
			t.Fatalf("cold%d: %+v, %v; want a load", i, r, err)
		}
		switch got := log.take(); {
		case slices.Equal(got, []string{"hget", "evalsha", "evalsha"}):
			plainFirst++
		case !slices.Equal(got, []string{"evalsha", "evalsha"}):
			t.Fatalf("cold%d sent %q, want the look and the commit, after a plain read at most", i, got)
		}
	}
	t.Logf("%d of %d warm keys read by the script, %d of %d cold keys plainly first", scripts, warm, plainFirst, cold)
	if limit := (presence.Max-presence.On)/presence.Miss + 1; plainFirst > limit {
		t.Fatalf("%d of %d cold keys were read plainly first; want at most %d", plainFirst, cold, limit)
	}
}
