package loadcall

import (
	"context"
	"testing"
)

// TestFence: a load's context gives the fence of its own key, or of each
// key of a batch under a lease, and none for another key or a plain
// context.
func TestFence(t *testing.T) {
	bg := context.Background()
	one := WithFence(bg, "a", 7)
	many := WithFences(bg, map[string]int64{"a": 3, "b": 4})
	cases := []struct {
		name  string
		ctx   context.Context
		key   string
		fence int64
		ok    bool
	}{
		{"plain context", bg, "a", 0, false},
		{"its key", one, "a", 7, true},
		{"another key", one, "b", 0, false},
		{"a batch's key", many, "b", 4, true},
		{"a key of no lease in the batch", many, "c", 0, false},
		{"a key's load inside a batch's", WithFence(many, "c", 9), "c", 9, true},
	}
	for _, tc := range cases {
		fence, ok := Fence(tc.ctx, tc.key)
		if fence != tc.fence || ok != tc.ok {
			t.Errorf("%s: Fence(%q) = %d, %v; want %d, %v", tc.name, tc.key, fence, ok, tc.fence, tc.ok)
		}
	}
}

// TestWithFences_noneKeepsContext: a batch with no key under a lease
// loads on its context as it is.
func TestWithFences_noneKeepsContext(t *testing.T) {
	ctx := WithFence(context.Background(), "a", 7)
	if got := WithFences(ctx, nil); got != ctx {
		t.Fatal("WithFences with no fences wrapped the context")
	}
	if fence, ok := Fence(WithFences(ctx, nil), "a"); !ok || fence != 7 {
		t.Fatalf("Fence = %d, %v; want the outer load's 7, true", fence, ok)
	}
}
