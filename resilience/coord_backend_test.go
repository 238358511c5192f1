package resilience_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/backend/backendtest"
	"github.com/herdguard/herdguard/resilience"
)

// counted is a backend whose views count their single-key and batch
// reads and acquires.
type counted struct {
	m                       backendtest.Memory
	loads, acquires         atomic.Int64
	loadManys, acquireManys atomic.Int64
}

func (c *counted) Open(s backend.Scope) (backend.Shared, error) {
	v, err := c.m.Open(s)
	if err != nil {
		return nil, err
	}
	return &countedView{Shared: v, many: v.(backend.SharedMany), c: c}, nil
}

type countedView struct {
	backend.Shared
	many backend.SharedMany
	c    *counted
}

func (v *countedView) Load(ctx context.Context, key string) ([]byte, error) {
	v.c.loads.Add(1)
	return v.Shared.Load(ctx, key)
}

func (v *countedView) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*backend.Lease, error) {
	v.c.acquires.Add(1)
	return v.Shared.TryAcquire(ctx, key, ttl)
}

func (v *countedView) LoadMany(ctx context.Context, keys []string) ([][]byte, error) {
	v.c.loadManys.Add(1)
	return v.many.LoadMany(ctx, keys)
}

func (v *countedView) TryAcquireMany(ctx context.Context, keys []string, ttl time.Duration) ([]*backend.Lease, []error) {
	v.c.acquireManys.Add(1)
	return v.many.TryAcquireMany(ctx, keys, ttl)
}

// TestBackend_getMany_usesTheBatchForms: over a view with the batch forms
// (backend.SharedMany), GetMany looks at a chunk of cold keys in one
// LoadMany, one TryAcquireMany and one more LoadMany, not in a Load, a
// TryAcquire and a Load per key (300,000 calls for 100,000 keys); a second
// pipeline then finds every value.
func TestBackend_getMany_usesTheBatchForms(t *testing.T) {
	var b counted
	p1 := buildOver(t, overMemory("batch", &b))
	p2 := buildOver(t, overMemory("batch", &b))
	c := &perKey{}
	keys := coldKeys("k", 500)
	ctx := context.Background()
	res, err := p1.GetMany(ctx, keys, c.loadMany)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if res[k].Value != "v-"+k || res[k].Source != resilience.SourceLoader {
			t.Fatalf("%q: %+v, want v-%s from the loader", k, res[k], k)
		}
	}
	if l, a, lm, am := b.loads.Load(), b.acquires.Load(), b.loadManys.Load(), b.acquireManys.Load(); l != 0 || a != 0 || lm != 2 || am != 1 {
		t.Fatalf("GetMany of %d cold keys: %d Loads, %d TryAcquires, %d LoadManys, %d TryAcquireManys; want 0, 0, 2, 1",
			len(keys), l, a, lm, am)
	}
	res, err = p2.GetMany(ctx, keys, c.loadMany)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if res[k].Value != "v-"+k || res[k].Source != resilience.SourceL2 || c.count(k) != 1 {
			t.Fatalf("%q from the other pipeline: %+v after %d loads, want v-%s from L2 after 1", k, res[k], c.count(k), k)
		}
	}
}
