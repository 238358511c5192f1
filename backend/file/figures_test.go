//go:build unix

package file

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
)

// figuresEnv turns the figures tests on:
//
//	HERDGUARD_FIGURES=1 go test -run Figures -v ./backend/file
const figuresEnv = "HERDGUARD_FIGURES"

func skipUnlessFigures(t *testing.T) {
	if os.Getenv(figuresEnv) == "" {
		t.Skip("set " + figuresEnv + "=1 to measure")
	}
}

// quantiles returns the median and the 99th percentile of d.
func quantiles(d []time.Duration) (p50, p99 time.Duration) {
	slices.Sort(d)
	return d[len(d)/2], d[min(len(d)-1, len(d)*99/100)]
}

// TestFiguresShared measures the backend's own operations, on the
// directory of the test (usually tmpfs or a local disk): a cold miss's
// backend work for the winner (Load of nothing, TryAcquire, Save with
// Release), an L2 hit (Load), and the delay from a holder's commit (the
// start of its Save with Release) to a waiter in another process waking.
func TestFiguresShared(t *testing.T) {
	skipUnlessFigures(t)
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir, "fig", time.Second)
	const n = 2000
	raw := make([]byte, 256)
	cold := make([]time.Duration, 0, n)
	hit := make([]time.Duration, 0, n)
	for i := range n {
		key := "cold:" + strconv.Itoa(i)
		start := time.Now()
		if b, err := s.Load(ctx, key); b != nil || err != nil {
			t.Fatal(b, err)
		}
		l, err := s.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Save(ctx, key, raw, backend.Save{Fence: l.Fence(), Token: l.Token(), Release: true, Until: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		l.Forget()
		cold = append(cold, time.Since(start))
		start = time.Now()
		if b, err := s.Load(ctx, key); len(b) != len(raw) || err != nil {
			t.Fatal(len(b), err)
		}
		hit = append(hit, time.Since(start))
	}
	c50, c99 := quantiles(cold)
	h50, h99 := quantiles(hit)
	fmt.Printf("FIGURES file shared cold-miss-backend p50=%v p99=%v n=%d\n", c50, c99, n)
	fmt.Printf("FIGURES file shared l2-hit p50=%v p99=%v n=%d\n", h50, h99, n)

	const rounds = 200
	c := startChild(t, "waker", childConfig{Dir: dir, Namespace: "fig", Key: "w", Callers: rounds})
	wake := make([]time.Duration, 0, rounds)
	for range rounds {
		c.expect(t, "ready", 30*time.Second)
		l, err := s.TryAcquire(ctx, "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := s.Save(ctx, "w", raw, backend.Save{Fence: l.Fence(), Token: l.Token(), Release: true}); err != nil {
			t.Fatal(err)
		}
		l.Forget()
		line := c.expect(t, "woke ", 30*time.Second)
		at, err := strconv.ParseInt(strings.TrimPrefix(line, "woke "), 10, 64)
		if err != nil {
			t.Fatal(line)
		}
		wake = append(wake, time.Unix(0, at).Sub(start))
	}
	w50, w99 := quantiles(wake)
	fmt.Printf("FIGURES file shared wake-other-process p50=%v p99=%v n=%d\n", w50, w99, rounds)
}

// childWaker subscribes to cfg.Key, prints "ready", and prints "woke
// <Unix nanoseconds>" when woken, cfg.Callers times.
func childWaker(cfg childConfig) error {
	s, err := openChild(cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	for range cfg.Callers {
		ch, stop := s.Subscribe(cfg.Key)
		fmt.Println("ready")
		select {
		case <-ch:
			fmt.Printf("woke %d\n", time.Now().UnixNano())
		case <-time.After(time.Minute):
			stop()
			return fmt.Errorf("not woken")
		}
		stop()
	}
	return nil
}
