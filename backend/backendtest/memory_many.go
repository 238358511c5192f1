package backendtest

import (
	"context"
	"time"

	"github.com/herdguard/herdguard/backend"
)

// The batch forms of a Memory view (backend.SharedMany), beside its
// single-key forms.

var _ backend.SharedMany = (*view)(nil)

// LoadMany implements backend.SharedMany.
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

// TryAcquireMany implements backend.SharedMany.
func (v *view) TryAcquireMany(ctx context.Context, keys []string, ttl time.Duration) ([]*backend.Lease, []error) {
	leases, errs := make([]*backend.Lease, len(keys)), make([]error, len(keys))
	for i, k := range keys {
		leases[i], errs[i] = v.TryAcquire(ctx, k, ttl)
	}
	return leases, errs
}
