package rcache

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/internal/rscript"
)

// Got is one key's answer from [Redis.GetMany]: as [Redis.Get] returns it.
type Got[V any] struct {
	Entry     Entry[V]
	Freshness Freshness
	Err       error
}

// GetMany is [Redis.Get] for many keys in one round trip: the i-th answer
// is keys[i]'s. err is the batch's failure, when it failed as a whole.
func (r *Redis[V]) GetMany(ctx context.Context, keys []string) ([]Got[V], error) {
	cmds := make([]redis.Cmder, len(keys))
	for i, k := range keys {
		cmds[i] = redis.NewStringCmd(ctx, "hget", r.keys.Value(k), rkey.FieldData)
	}
	if err := rscript.Send(ctx, r.client, cmds); err != nil {
		return nil, fmt.Errorf("cache: get: %w", err)
	}
	out := make([]Got[V], len(keys))
	for i, k := range keys {
		raw, err := cmds[i].(*redis.StringCmd).Bytes()
		switch {
		case errors.Is(err, redis.Nil):
			out[i].Freshness = Miss
		case redis.HasErrorPrefix(err, "WRONGTYPE"):
			r.corrupt(k, fmt.Errorf("%w: value key holds the wrong type", errEnvelope))
			out[i].Freshness = Miss
		case err != nil:
			out[i].Err = fmt.Errorf("cache: get: %w", err)
		default:
			out[i].Entry, out[i].Freshness = r.Decode(k, raw)
		}
	}
	return out, nil
}

// Write is one entry for [Redis.SetMany]: as [Redis.Set] writes it
// without Token; with Token, only while the lock holds it ([backend.ErrLockLost]
// otherwise), and with Release too, as [Redis.Commit] writes it.
type Write[V any] struct {
	Key     string
	Entry   Entry[V]
	Token   string
	Release bool
}

// Written is one write's outcome from [Redis.SetMany]: as the matching
// single write returns it.
type Written struct {
	Stored bool
	Err    error
}

// SetMany runs writes as batch scripts of up to 128 writes each, 4 a
// round trip (one round trip for up to 512 writes; a Cluster's scripts
// carry the writes of one hash slot): the i-th outcome is writes[i]'s.
// err is the batch's failure, when it failed as a whole.
func (r *Redis[V]) SetMany(ctx context.Context, writes []Write[V]) ([]Written, error) {
	out := make([]Written, len(writes))
	var idx []int
	var args [][]any
	for i, w := range writes {
		a, err := r.setArgs(w.Key, w.Entry, w.Token, w.Release)
		if err != nil {
			out[i].Err = err
			continue
		}
		args = append(args, a)
		idx = append(idx, i)
	}
	if len(args) == 0 {
		return out, nil
	}
	var runs [][]int // indices in args
	if r.cluster {
		runs = rscript.Chunks(len(args), func(j int) uint16 { return rkey.Slot(args[j][1].(string)) })
	} else {
		runs = rscript.Chunks(len(args), nil)
	}
	many := make([][]any, len(runs))
	for n, run := range runs {
		// numkeys, the pairs of keys, the field names, then each write's
		// w (see set.lua), from setArgs' layout.
		m := make([]any, 0, 4+9*len(run))
		m = append(m, 2*len(run))
		for _, j := range run {
			m = append(m, args[j][1], args[j][2])
		}
		m = append(m, rkey.FieldFence, rkey.FieldData, rkey.FieldExpires)
		for _, j := range run {
			a := args[j]
			m = append(m, a[3], a[4], a[5], a[8], a[10], a[11], a[12])
		}
		many[n] = m
	}
	cmds, err := rscript.RunWaves(ctx, r.client, setManyScript, many)
	if err != nil {
		return nil, fmt.Errorf("cache: set: %w", err)
	}
	for n, run := range runs {
		replies, err := cmds[n].(*redis.Cmd).Slice()
		if err == nil && len(replies) != len(run) {
			err = fmt.Errorf("set script returned %d replies for %d writes", len(replies), len(run))
		}
		for m, j := range run {
			i := idx[j]
			var v int64
			if err == nil {
				v, _ = replies[m].(int64)
			}
			switch {
			case err != nil:
				out[i].Err = fmt.Errorf("cache: set: %w", err)
			case v < 0:
				out[i].Err = fmt.Errorf("cache: set: %w", backend.ErrLockLost)
			default:
				out[i].Stored = v == 1
			}
		}
	}
	return out, nil
}

// setArgs is the numkeys, keys and arguments of set.lua for one write:
// numkeys, then the two keys (strings), then the arguments.
func (r *Redis[V]) setArgs(key string, e Entry[V], token string, release bool) ([]any, error) {
	if e.Fence < 0 {
		return nil, fmt.Errorf("cache: set: negative fence %d", e.Fence)
	}
	if release && token == "" {
		return nil, errors.New("cache: commit: empty lock token")
	}
	raw, _, ttl, err := r.Encode("set", key, e, e.Fence)
	if err != nil {
		return nil, err
	}
	ms := rkey.Millis(ttl)
	var channel any = ""
	if release {
		channel = r.channel
	}
	// The fence goes as an int64, which go-redis writes in decimal: the
	// script reads the string it would have been.
	return []any{2, r.keys.Value(key), r.keys.Lock(key),
		e.Fence, raw, ms,
		rkey.FieldFence, rkey.FieldData, token,
		rkey.FieldExpires, e.Expires.UnixMilli(), channel, key}, nil
}
