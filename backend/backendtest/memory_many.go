package backendtest

import (
	"context"
	"time"

	"github.com/herdguard/herdguard/lock"
	"github.com/herdguard/herdguard/resilience"
)

// The batch forms of a Memory view (resilience.SharedMany), beside its
// single-key forms.

var _ resilience.SharedMany = (*view)(nil)

// LoadMany implements resilience.SharedMany.
func (v *view) LoadMany(ctx context.Context, keys []string) ([][]byte, error) {
	if err := v.check(ctx); err != nil {
		return nil, err
	}
	now := time.Now()
	v.sp.mu.Lock()
	defer v.sp.mu.Unlock()
	out := make([][]byte, len(keys))
	for i, k := range keys {
		if val, ok := v.sp.values[k]; ok && now.Before(val.until) {
			out[i] = append([]byte{}, val.raw...)
		}
	}
	return out, nil
}

// TryAcquireMany implements resilience.SharedMany.
func (v *view) TryAcquireMany(ctx context.Context, keys []string, ttl time.Duration) ([]*lock.Lease, []error) {
	leases, errs := make([]*lock.Lease, len(keys)), make([]error, len(keys))
	for i, k := range keys {
		leases[i], errs[i] = v.TryAcquire(ctx, k, ttl)
	}
	return leases, errs
}
