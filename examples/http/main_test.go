package main

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/resilience/httpx"
)

func TestRun_retriesThenBreakerThenFallback(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	rep, err := run(ctx, Config{AttemptTimeout: time.Second}, &out)
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	want := []Call{
		{Status: 200, Body: "v1", Hits: 3},                              // 503, 503, 200
		{Status: 200, Body: "v2", Hits: 2},                              // 429 + Retry-After, 200
		{Status: 200, Body: "last known good", Hits: 3, Fallback: true}, // timeout, 500, 500: open
		{Status: 200, Body: "last known good", Hits: 0, Fallback: true}, // refused by the breaker
	}
	if len(rep.Calls) != len(want) {
		t.Fatalf("%d calls reported, want %d", len(rep.Calls), len(want))
	}
	for i, w := range want {
		got := rep.Calls[i]
		got.Cause = nil
		if got != w {
			t.Errorf("call %d = %+v, want %+v", i+1, got, w)
		}
	}
	var se *httpx.StatusError
	if c := rep.Calls[2].Cause; !errors.As(c, &se) || se.StatusCode != 500 {
		t.Errorf("call 3 fell back because of %v, want the last 500", c)
	}
	if c := rep.Calls[3].Cause; !errors.Is(c, breaker.ErrOpen) {
		t.Errorf("call 4 fell back because of %v, want breaker.ErrOpen", c)
	}
	if rep.Hits != 8 {
		t.Errorf("upstream hits = %d, want 8", rep.Hits)
	}
	if !slices.Equal(rep.Transitions, []string{"closed->open"}) {
		t.Errorf("breaker transitions = %v, want [closed->open]", rep.Transitions)
	}
}
