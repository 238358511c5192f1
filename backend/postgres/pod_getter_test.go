package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/lock"
	"github.com/herdguard/herdguard/resilience"
)

// newGetter returns a pod's getter: the lock protocol on the Shared
// directly, as a pipeline runs it (subscribe, look, lock, re-check, load,
// write back and release in one step, or wait for the wake-up).
func newGetter(b *Backend, c podConfig) (getFunc, func(), error) {
	beat := c.Beat
	if beat == 0 {
		beat = time.Second
	}
	sh, err := b.Open(resilience.BackendScope{Namespace: c.Name, Heartbeat: beat})
	if err != nil {
		return nil, nil, err
	}
	fresh := c.Fresh
	if fresh == 0 {
		fresh = time.Minute
	}
	lease := c.Lease
	if lease == 0 {
		lease = 30 * time.Second
	}
	get := func(ctx context.Context, key string, load func(context.Context, string) (string, error)) (string, string, error) {
		wake, unsub := sh.Subscribe(key)
		defer unsub()
		for {
			if v, err := sh.Load(ctx, key); err != nil {
				return "", "", err
			} else if v != nil {
				return string(v), "l2", nil
			}
			l, err := sh.TryAcquire(ctx, key, lease)
			switch {
			case err == nil:
				return holdAndLoad(ctx, sh, l, key, load, fresh)
			case !errors.Is(err, lock.ErrNotAcquired):
				return "", "", err
			}
			t := time.NewTimer(200 * time.Millisecond)
			select {
			case <-wake:
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return "", "", ctx.Err()
			}
			t.Stop()
		}
	}
	return get, func() { _ = sh.Close() }, nil
}

func holdAndLoad(ctx context.Context, sh resilience.Shared, l *lock.Lease, key string,
	load func(context.Context, string) (string, error), fresh time.Duration) (string, string, error) {
	if v, err := sh.Load(ctx, key); err == nil && v != nil {
		_ = l.Release(ctx)
		return string(v), "l2", nil
	}
	l.KeepAlive(ctx, nil)
	v, err := load(ctx, key)
	if err != nil {
		_ = l.Release(context.WithoutCancel(ctx))
		return "", "", err
	}
	_, err = sh.Save(ctx, key, []byte(v), cache.Save{Fence: l.Fence(), Token: l.Token(), Release: true,
		Until: time.Now().Add(fresh)})
	l.Forget()
	return v, "loader", err
}
