package rcache

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/internal/rscript"
)

var (
	//go:embed write.lua
	writeSource string
	//go:embed invalidate.lua
	invalidateSource string

	writeScript      = redis.NewScript(rkey.FenceLua + writeSource)
	invalidateScript = redis.NewScript(rkey.FenceLua + invalidateSource)
)

// WriteOptions configures [Redis.Write] and [Redis.Invalidate].
type WriteOptions struct {
	// Origin tags the announcement, so that the writer's own process can
	// tell its writes from others' (see rkey.Announcement). It must be
	// rkey.OriginLen bytes long.
	Origin string
	// FenceRetention is how long the key's fence counter lives from now;
	// it should match package lock's (lock.DefaultFenceRetention).
	FenceRetention time.Duration
	// Hold is how long Invalidate's tombstone lives: as long as a load
	// that started before it may still try to write back without a lock.
	// Ignored by Write.
	Hold time.Duration
}

func (o WriteOptions) check(op string) error {
	switch {
	case len(o.Origin) != rkey.OriginLen:
		return fmt.Errorf("cache: %s: origin must be %d bytes", op, rkey.OriginLen)
	case o.FenceRetention <= 0:
		return fmt.Errorf("cache: %s: fence retention must be positive", op)
	}
	return nil
}

// Write stores e under key with a fence above every lock grant and every
// write the key has seen, and announces it on the namespace's channel, in
// one round trip. A lock holder that loaded before it, and an unlocked
// load, cannot overwrite it (see set.lua); the lock itself is left to its
// holder, whose release wakes its waiters onto this value. e.Fence is
// ignored; Write returns the fence it wrote with. It returns
// [ErrExpiredEntry] if e.StaleUntil has passed, and an error matching
// [ErrCodec] if the value does not encode.
func (r *Redis[V]) Write(ctx context.Context, key string, e Entry[V], o WriteOptions) (fence int64, err error) {
	if err := o.check("write"); err != nil {
		return 0, err
	}
	raw, _, ttl, err := r.Encode("write", key, e, 0)
	if err != nil {
		return 0, err
	}
	s, err := rscript.Run(ctx, r.client, writeScript,
		[]string{r.keys.Value(key), r.keys.Lock(key), r.keys.Fence(key)},
		raw, rkey.Millis(ttl), rkey.FieldFence, rkey.FieldData, rkey.FieldExpires,
		e.Expires.UnixMilli(), rkey.Millis(o.FenceRetention), r.keys.Channel(),
		rkey.Announcement(rkey.KindSet, o.Origin, key),
	).Text()
	if err != nil {
		return 0, fmt.Errorf("cache: write: %w", err)
	}
	return parseFence("write", s)
}

// Invalidate replaces key's entry with a tombstone, a fence above every
// lock grant and write so far that readers see as a miss, for o.Hold;
// deletes key's lock, so that a holder still loading writes nothing back;
// and announces it on the namespace's channel; in one round trip. A grant
// after it gets a higher fence, so a load that starts after Invalidate
// writes normally. It returns the tombstone's fence.
func (r *Redis[V]) Invalidate(ctx context.Context, key string, o WriteOptions) (fence int64, err error) {
	if err := o.check("invalidate"); err != nil {
		return 0, err
	}
	if o.Hold <= 0 {
		return 0, errors.New("cache: invalidate: hold must be positive")
	}
	s, err := rscript.Run(ctx, r.client, invalidateScript,
		[]string{r.keys.Value(key), r.keys.Lock(key), r.keys.Fence(key)},
		rkey.Millis(o.Hold), rkey.FieldFence, rkey.Millis(o.FenceRetention), r.keys.Channel(),
		rkey.Announcement(rkey.KindInvalidate, o.Origin, key),
	).Text()
	if err != nil {
		return 0, fmt.Errorf("cache: invalidate: %w", err)
	}
	return parseFence("invalidate", s)
}

func parseFence(op, s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("cache: %s: %w", op, errors.Join(errors.New("bad fence in reply "+strconv.Quote(s)), err))
	}
	return n, nil
}
