package resilience

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/herdguard/herdguard/internal/redistest"
)

// fenceRecorder is a loader that records what Fence says of each key it
// loads, and of a key it does not.
type fenceRecorder struct {
	mu     sync.Mutex
	fences map[string][]int64 // key -> fences seen, 0 for none
	other  bool               // Fence said ok for a key not being loaded
}

func (r *fenceRecorder) see(ctx context.Context, key string) {
	f, ok := Fence(ctx, key)
	if !ok {
		f = 0
	}
	_, otherOK := Fence(ctx, "not-"+key)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fences == nil {
		r.fences = map[string][]int64{}
	}
	r.fences[key] = append(r.fences[key], f)
	r.other = r.other || otherOK
}

func (r *fenceRecorder) load(ctx context.Context, key string) (string, error) {
	r.see(ctx, key)
	return "v:" + key, nil
}

func (r *fenceRecorder) loadMany(ctx context.Context, keys []string) (map[string]string, error) {
	m := map[string]string{}
	for _, k := range keys {
		r.see(ctx, k)
		m[k] = "v:" + k
	}
	return m, nil
}

// TestFence_reachesTheLoader: under Lock (embedded, and Redis with Get
// and GetMany), the loader learns the fence of its grant for each key it
// loads, never for another key; a key's next load under a new grant has
// a higher fence. Without Lock, there is no fence.
func TestFence_reachesTheLoader(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		b      *Builder[string]
		many   bool
		fenced bool
	}{
		{"embedded Lock", New[string]("fence-embedded").Cache(time.Minute).Lock(LockSettings{}), false, true},
		{"Redis Lock, Get", New[string]("fence-redis").Cache(time.Minute).Redis(srv.Client()).Lock(LockSettings{}), false, true},
		{"Redis Lock, GetMany", New[string]("fence-many").Cache(time.Minute).Redis(srv.Client()).Lock(LockSettings{}), true, true},
		{"Redis without Lock", New[string]("fence-nolock").Cache(time.Minute).Redis(srv.Client()), false, false},
		{"embedded, no Lock", New[string]("fence-none").Cache(time.Minute), true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := build(t, tc.b)
			r := &fenceRecorder{}
			keys := []string{"a", "b", "c"}
			for range 2 { // the second round after Invalidate: new grants
				if tc.many {
					if _, err := p.GetMany(ctx, keys, r.loadMany); err != nil {
						t.Fatal(err)
					}
				} else {
					for _, k := range keys {
						if _, err := p.Get(ctx, k, r.load); err != nil {
							t.Fatal(err)
						}
					}
				}
				for _, k := range keys {
					if err := p.Invalidate(ctx, k); err != nil {
						t.Fatal(err)
					}
				}
			}
			if r.other {
				t.Error("Fence answered for a key the load was not for")
			}
			for _, k := range keys {
				fs := r.fences[k]
				if len(fs) != 2 {
					t.Fatalf("%s: %d loads, want 2", k, len(fs))
				}
				switch {
				case tc.fenced && (fs[0] <= 0 || fs[1] <= fs[0]):
					t.Errorf("%s: fences %v, want positive and rising", k, fs)
				case !tc.fenced && (fs[0] != 0 || fs[1] != 0):
					t.Errorf("%s: fences %v without Lock, want none", k, fs)
				}
			}
		})
	}
}

// ExampleFence: a loader that also writes elsewhere fences that write
// with its grant's fence.
func ExampleFence() {
	p, err := New[string]("fence-example").Cache(time.Minute).Lock(LockSettings{}).Build()
	if err != nil {
		panic(err)
	}
	defer p.Close()
	v, err := p.Get(context.Background(), "report:7", func(ctx context.Context, key string) (string, error) {
		fence, ok := Fence(ctx, key)
		// e.g. UPDATE reports SET body = $1, fence = $2 WHERE id = $3 AND fence < $2
		fmt.Println("fenced:", ok, fence > 0)
		return "body", nil
	})
	fmt.Println(v, err)
	// Output:
	// fenced: true true
	// body <nil>
}
