package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/internal/rscript"
)

// Look is what [Redis.TryAcquireOrGetMany] found for one key: as
// [Redis.TryAcquireOrGet] returns it.
type Look struct {
	Lease *Lease // the grant, when the lock was taken
	Value []byte // the stored value's bytes, fresh or not; nil when none
	Fresh bool   // the value is fresh: no lock was tried
	Err   error  // ErrNotAcquired, a *BackendError, or ctx's error
}

// TryAcquireOrGetMany is [Redis.TryAcquireOrGet] for many keys in one
// round trip: the i-th look is keys[i]'s. Keys must be distinct. A grant
// whose outcome is unknown (the batch failed in flight) is deleted by its
// token in the background, as TryAcquire does.
func (r *Redis) TryAcquireOrGetMany(ctx context.Context, keys []string, lease time.Duration, now time.Time) []Look {
	looks := make([]Look, len(keys))
	for _, k := range keys {
		if err := checkArgs(k, lease); err != nil {
			for i := range looks {
				looks[i].Err = err
			}
			return looks
		}
	}
	if err := ctx.Err(); err != nil {
		for i := range looks {
			looks[i].Err = fmt.Errorf("lock: acquire: %w", err)
		}
		return looks
	}
	ms := max(now.UnixMilli(), 1)
	beat := min(r.heartbeat, lease/3)
	toks := make([]string, len(keys))
	args := make([][]any, len(keys))
	for i, k := range keys {
		toks[i] = newToken()
		args[i] = []any{3, r.keys.Lock(k), r.keys.Fence(k), r.keys.Value(k),
			toks[i], rkey.Millis(lease), rkey.Millis(lease + r.retention), rkey.FieldFence, rkey.Millis(2 * beat),
			ms, rkey.FieldData, rkey.FieldExpires}
	}
	cmds, berr := rscript.RunMany(ctx, r.client, acquireScript, args)
	var unknown []int
	errs := make([]error, len(keys)) // each key's error, for the cleanup
	for i, k := range keys {
		var reply []any
		err := berr
		if err == nil {
			reply, err = cmds[i].(*redis.Cmd).Slice()
		}
		errs[i] = err
		if err == nil && len(reply) < 2 {
			err = fmt.Errorf("acquire script returned %d values, want at least 2", len(reply))
		}
		if err != nil {
			if !isReply(err) {
				unknown = append(unknown, i)
			}
			looks[i].Err = failure(ctx, "acquire", k, err)
			continue
		}
		fence, _ := reply[0].(int64)
		how, _ := reply[1].(int64)
		if len(reply) > 2 {
			if s, ok := reply[2].(string); ok {
				looks[i].Value = []byte(s)
			}
		}
		switch {
		case fence > 0:
			l := newLease(r, k, toks[i], fence, lease, beat)
			l.tookOver = how != 1
			looks[i].Lease = l
		case fence < 0:
			looks[i].Fresh = true
		default:
			looks[i].Err = ErrNotAcquired
		}
	}
	if len(unknown) > 0 {
		r.cleanups.Add(1)
		go func() {
			defer r.cleanups.Done()
			afterSettled(berr)
			for _, i := range unknown {
				afterSettled(errs[i])
			}
			cctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			defer cancel()
			rel := make([][]any, len(unknown))
			for j, i := range unknown {
				rel[j] = []any{1, r.keys.Lock(keys[i]), toks[i], "", ""}
			}
			_, _ = rscript.RunMany(cctx, r.client, releaseScript, rel)
		}()
	}
	return looks
}

// ReleaseMany releases leases granted by r (a lease granted elsewhere is
// released on its own), announcing their keys as Release does, in one
// round trip, and stops their watchdogs. It returns the first error; a
// lease already released is skipped.
func (r *Redis) ReleaseMany(ctx context.Context, leases []*Lease) error {
	var args [][]any
	var mine []*Lease
	var errs []error
	for _, l := range leases {
		l.stopWatchdog()
		l.mu.Lock()
		done := l.released
		l.released = true
		l.mu.Unlock()
		if done {
			continue
		}
		if l.h != r {
			errs = append(errs, l.h.release(ctx, l.key, l.token))
			continue
		}
		mine = append(mine, l)
		args = append(args, []any{1, r.keys.Lock(l.key), l.token, r.channel, l.key})
	}
	if len(args) == 0 {
		return errors.Join(errs...)
	}
	cmds, err := rscript.RunMany(ctx, r.client, releaseScript, args)
	if err != nil {
		return failure(ctx, "release", mine[0].key, err)
	}
	for i, c := range cmds {
		if err := c.Err(); err != nil {
			errs = append(errs, failure(ctx, "release", mine[i].key, err))
		}
	}
	return errors.Join(errs...)
}

// ExtendMany is each lease's watchdog beat in one round trip: it extends
// each of leases (granted by r) to its TTL from now and records the beat.
// lost[i] is set when leases[i] was found lost (ErrNotHeld); err is the
// batch's failure, if it failed as a whole.
func (r *Redis) ExtendMany(ctx context.Context, leases []*Lease) (lost []bool, err error) {
	lost = make([]bool, len(leases))
	if len(leases) == 0 {
		return lost, nil
	}
	args := make([][]any, len(leases))
	for i, l := range leases {
		args[i] = []any{2, r.keys.Lock(l.key), r.keys.Fence(l.key), l.token, rkey.Millis(l.ttl), rkey.Millis(l.ttl + r.retention)}
	}
	cmds, err := rscript.RunMany(ctx, r.client, extendScript, args)
	if err != nil {
		return lost, failure(ctx, "extend", leases[0].key, err)
	}
	for i, c := range cmds {
		n, err := c.(*redis.Cmd).Int64()
		if err == nil && n == 0 {
			lost[i] = true
		}
	}
	return lost, nil
}

// Every returns how often the lease's watchdog beats.
func (l *Lease) Every() time.Duration { return l.every }
