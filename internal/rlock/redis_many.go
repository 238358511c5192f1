package rlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/internal/rscript"
)

// Look is what [Redis.TryAcquireOrGetMany] found for one key: as
// [Redis.TryAcquireOrGet] returns it.
type Look struct {
	Lease *backend.Lease // the grant, when the lock was taken
	Value []byte         // the stored value's bytes, fresh or not; nil when none
	Fresh bool           // the value is fresh: no lock was tried
	Err   error          // backend.ErrNotAcquired, a *backend.BackendError, or ctx's error
}

// TryAcquireOrGetMany is [Redis.TryAcquireOrGet] for many keys: the i-th
// look is keys[i]'s. Keys must be distinct. The keys go as runs of the
// batch look script (acquire_many.lua, the rules of acquire.lua), up to
// 128 keys a run, at most 4 runs a round trip, one round trip after the
// other: one round trip for up to 512 keys. A grant whose outcome is
// unknown (the batch failed in flight, or a run failed part way) is
// deleted by its token in the background, as TryAcquire does.
func (r *Redis) TryAcquireOrGetMany(ctx context.Context, keys []string, lease time.Duration, now time.Time) []Look {
	looks := make([]Look, len(keys))
	for _, k := range keys {
		if err := CheckArgs(k, lease); err != nil {
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
	for i := range keys {
		toks[i] = NewToken()
	}
	runs := r.chunks(len(keys), func(i int) string { return keys[i] })
	args := make([][]any, len(runs))
	for j, run := range runs {
		a := make([]any, 0, 1+4*len(run)+7)
		a = append(a, 3*len(run))
		for _, i := range run {
			k := keys[i]
			a = append(a, r.keys.Lock(k), r.keys.Fence(k), r.keys.Value(k))
		}
		a = append(a, rkey.Millis(lease), rkey.Millis(lease+r.retention), rkey.FieldFence, rkey.Millis(2*beat),
			ms, rkey.FieldData, rkey.FieldExpires)
		for _, i := range run {
			a = append(a, toks[i])
		}
		args[j] = a
	}
	cmds, berr := rscript.RunWaves(ctx, r.client, acquireManyScript, args)
	var unknown []int
	errs := make([]error, len(keys)) // each key's error, for the cleanup
	for j, run := range runs {
		replies, err := runReplies(cmds, berr, j, len(run), "acquire")
		if err != nil {
			// The run may have stopped part way (or its outcome is
			// unknown): its keys' grants are deleted by their tokens.
			for _, i := range run {
				errs[i] = err
				unknown = append(unknown, i)
				looks[i].Err = failure(ctx, "acquire", keys[i], err)
			}
			continue
		}
		for n, i := range run {
			reply, _ := replies[n].([]any)
			if len(reply) < 2 {
				errs[i] = fmt.Errorf("acquire script returned %d values, want at least 2", len(reply))
				looks[i].Err = failure(ctx, "acquire", keys[i], errs[i])
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
				l := NewLease(r.holder, keys[i], toks[i], fence, lease, beat, how != 1)
				looks[i].Lease = l
			case fence < 0:
				looks[i].Fresh = true
			default:
				looks[i].Err = backend.ErrNotAcquired
			}
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
			ks := make([]string, len(unknown))
			ts := make([]string, len(unknown))
			for j, i := range unknown {
				ks[j], ts[j] = keys[i], toks[i]
			}
			_ = r.releaseMany(cctx, ks, ts, "")
		}()
	}
	return looks
}

// chunks splits n keys (key(i) being the i-th) into the runs of a batch
// script: see [rscript.Chunks].
func (r *Redis) chunks(n int, key func(i int) string) [][]int {
	if !r.cluster {
		return rscript.Chunks(n, nil)
	}
	return rscript.Chunks(n, func(i int) uint16 { return rkey.Slot(r.keys.Lock(key(i))) })
}

// releaseMany runs release_many.lua for keys, held by toks, announcing on
// channel (empty for none): err[i] is keys[i]'s failure, nil when
// released, backend.ErrNotHeld when the token no longer held the lock.
func (r *Redis) releaseMany(ctx context.Context, keys, toks []string, channel string) []error {
	errs := make([]error, len(keys))
	runs := r.chunks(len(keys), func(i int) string { return keys[i] })
	args := make([][]any, len(runs))
	for j, run := range runs {
		a := make([]any, 0, 2+3*len(run))
		a = append(a, len(run))
		for _, i := range run {
			a = append(a, r.keys.Lock(keys[i]))
		}
		a = append(a, channel)
		for _, i := range run {
			a = append(a, toks[i], keys[i])
		}
		args[j] = a
	}
	cmds, berr := rscript.RunWaves(ctx, r.client, releaseManyScript, args)
	for j, run := range runs {
		replies, err := runReplies(cmds, berr, j, len(run), "release")
		for n, i := range run {
			switch {
			case err != nil:
				errs[i] = failure(ctx, "release", keys[i], err)
			case replies[n] == int64(0):
				errs[i] = backend.ErrNotHeld
			}
		}
	}
	return errs
}

// ReleaseMany releases leases granted by r (a lease granted elsewhere is
// released on its own), announcing their keys as Release does, in round
// trips as TryAcquireOrGetMany's, and stops their watchdogs. It returns the first error; a
// lease already released is skipped.
func (r *Redis) ReleaseMany(ctx context.Context, leases []*backend.Lease) error {
	var mine []*backend.Lease
	var errs []error
	for _, l := range leases {
		h, done := l.Detach()
		if done {
			continue
		}
		if h != backend.Holder(r.holder) { // granted by another locker
			errs = append(errs, h.Release(ctx, l.Key(), l.Token()))
			continue
		}
		mine = append(mine, l)
	}
	if len(mine) == 0 {
		return errors.Join(errs...)
	}
	keys := make([]string, len(mine))
	toks := make([]string, len(mine))
	for i, l := range mine {
		keys[i], toks[i] = l.Key(), l.Token()
	}
	for _, err := range r.releaseMany(ctx, keys, toks, r.channel) {
		if err != nil && !errors.Is(err, backend.ErrNotHeld) {
			errs = append(errs, err) // the first: the others are alike
			break
		}
	}
	return errors.Join(errs...)
}

// ExtendMany is each lease's watchdog beat, in round trips as
// TryAcquireOrGetMany's: it extends
// each of leases (granted by r) to its TTL from now and records the beat.
// lost[i] is set when leases[i] was found lost (backend.ErrNotHeld); err is the
// batch's failure, if it failed as a whole or one of its round trips did.
func (r *Redis) ExtendMany(ctx context.Context, leases []*backend.Lease) (lost []bool, err error) {
	lost = make([]bool, len(leases))
	if len(leases) == 0 {
		return lost, nil
	}
	runs := r.chunks(len(leases), func(i int) string { return leases[i].Key() })
	args := make([][]any, len(runs))
	for j, run := range runs {
		a := make([]any, 0, 1+5*len(run))
		a = append(a, 2*len(run))
		for _, i := range run {
			a = append(a, r.keys.Lock(leases[i].Key()), r.keys.Fence(leases[i].Key()))
		}
		for _, i := range run {
			l := leases[i]
			a = append(a, l.Token(), rkey.Millis(l.TTL()), rkey.Millis(l.TTL()+r.retention))
		}
		args[j] = a
	}
	cmds, err := rscript.RunWaves(ctx, r.client, extendManyScript, args)
	if err != nil {
		return lost, failure(ctx, "extend", leases[0].Key(), err)
	}
	var failed error // a round trip's failure, when only some failed
	for j, run := range runs {
		replies, err := cmds[j].(*redis.Cmd).Slice()
		if err != nil && !isReply(err) && failed == nil {
			failed = failure(ctx, "extend", leases[run[0]].Key(), err)
		}
		if err != nil || len(replies) != len(run) {
			continue
		}
		for n, i := range run {
			lost[i] = replies[n] == int64(0)
		}
	}
	return lost, failed
}

// runReplies is the replies of the j-th of a batch's script runs, one per
// key of its n keys, or the error that it, or its round trip (berr), met.
func runReplies(cmds []redis.Cmder, berr error, j, n int, script string) ([]any, error) {
	if berr != nil {
		return nil, berr
	}
	replies, err := cmds[j].(*redis.Cmd).Slice()
	if err == nil && len(replies) != n {
		err = fmt.Errorf("%s script returned %d replies for %d keys", script, len(replies), n)
	}
	return replies, err
}
