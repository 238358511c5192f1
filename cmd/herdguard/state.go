package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/rcache"
	"github.com/herdguard/herdguard/internal/rkey"
)

// Value states, as inspect reports them.
const (
	stateAbsent    = "absent"
	stateFresh     = "fresh"
	stateStale     = "stale"
	stateTombstone = "tombstone"
	stateForeign   = "foreign" // a key of another type, or a hash that is not an entry
)

// valueState is what a key's value hash says.
type valueState struct {
	State string `json:"state"`
	// Tombstone is "invalidated" (a fence with no data, written by
	// Invalidate) or "not-found" (a stored not-found entry).
	Tombstone    string     `json:"tombstone,omitempty"`
	Fence        int64      `json:"fence,omitempty"`
	Expires      *time.Time `json:"expires,omitempty"`
	StaleUntil   *time.Time `json:"stale_until,omitempty"`
	TTLMillis    int64      `json:"ttl_ms,omitempty"`
	Written      *time.Time `json:"written,omitempty"`
	LoadMillis   int64      `json:"load_ms,omitempty"`
	Bytes        int        `json:"bytes,omitempty"`
	Undecodable  string     `json:"undecodable,omitempty"`
	Value        *string    `json:"value,omitempty"`
	entryPayload []byte
}

// lockState is what a key's lock hash says, read as internal/rlock/acquire.lua reads
// it.
type lockState struct {
	Key       string `json:"key,omitempty"`
	Held      bool   `json:"held"`
	Foreign   bool   `json:"foreign,omitempty"`
	Token     string `json:"token,omitempty"`
	Fence     int64  `json:"fence,omitempty"`
	BeatAgeMs *int64 `json:"beat_age_ms,omitempty"`
	DeadAfter int64  `json:"dead_after_ms,omitempty"`
	PTTLMs    int64  `json:"pttl_ms,omitempty"`
	// TakeOver says what a TryAcquire would do now: "free" (acquire),
	// "no" (a live holder keeps it), "dead" (take over a holder past its
	// dead-after) or "foreign" (take over a key this library did not
	// write).
	TakeOver string `json:"take_over"`
}

// WouldTakeOver reports whether a TryAcquire would take the lock from a
// holder now.
func (l lockState) WouldTakeOver() bool { return l.TakeOver == "dead" || l.TakeOver == "foreign" }

// lockCmds are the queued reads of one lock key.
type lockCmds struct {
	kind *redis.StatusCmd
	hash *redis.SliceCmd
	pttl *redis.DurationCmd
}

func queueLock(p redis.Pipeliner, ctx context.Context, name string) lockCmds {
	return lockCmds{
		kind: p.Type(ctx, name),
		hash: p.HMGet(ctx, name, rkey.LockToken, rkey.LockFence, rkey.LockBeat, rkey.LockDeadAfter),
		pttl: p.PTTL(ctx, name),
	}
}

// state decides the lock's state as acquire.lua does, with nowMs the
// server's clock.
func (c lockCmds) state(nowMs int64) (lockState, error) {
	kind, err := c.kind.Result()
	if err != nil {
		return lockState{}, err
	}
	switch kind {
	case "none":
		return lockState{TakeOver: "free"}, nil
	case "hash":
	default:
		return lockState{Held: true, Foreign: true, TakeOver: "foreign"}, nil
	}
	v, err := c.hash.Result()
	if err != nil {
		return lockState{}, err
	}
	pttl, err := c.pttl.Result()
	if err != nil {
		return lockState{}, err
	}
	l := lockState{Held: true, PTTLMs: pttl.Milliseconds()}
	tok, _ := v[0].(string)
	l.Token = tok
	l.Fence, _ = strconv.ParseInt(str(v[1]), 10, 64)
	beat, errB := strconv.ParseInt(str(v[2]), 10, 64)
	dead, errD := strconv.ParseInt(str(v[3]), 10, 64)
	if tok == "" || errB != nil || errD != nil || pttl < 0 {
		// No expiry (PTTL -1) or missing fields: not written by package
		// lock, taken over as foreign.
		l.Foreign, l.TakeOver = true, "foreign"
		return l, nil
	}
	age := max(nowMs-beat, 0)
	l.BeatAgeMs, l.DeadAfter = &age, dead
	if nowMs-beat <= dead {
		l.TakeOver = "no"
	} else {
		l.TakeOver = "dead"
	}
	return l, nil
}

func str(v any) string { s, _ := v.(string); return s }

// serverMillis reads the Redis server's clock, which lock beats use.
func serverMillis(t *redis.TimeCmd) (int64, error) {
	now, err := t.Result()
	if err != nil {
		return 0, err
	}
	return now.UnixMilli(), nil
}

// rawCodec hands an entry's payload over as it is stored, whatever codec
// wrote it.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, errors.New("herdguard: raw codec takes *[]byte")
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return errors.New("herdguard: raw codec takes *[]byte")
	}
	*b = append([]byte(nil), data...)
	return nil
}

// readKey reads key's value and lock in one round trip.
func readKey(ctx context.Context, rdb *redis.Client, keys rkey.Space, o options, key string) (valueState, lockState, error) {
	var (
		kind  *redis.StatusCmd
		hash  *redis.SliceCmd
		vpttl *redis.DurationCmd
		lc    lockCmds
		clock *redis.TimeCmd
	)
	vk := keys.Value(key)
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		kind = p.Type(ctx, vk)
		hash = p.HMGet(ctx, vk, rkey.FieldData, rkey.FieldExpires, rkey.FieldFence)
		vpttl = p.PTTL(ctx, vk)
		lc = queueLock(p, ctx, keys.Lock(key))
		clock = p.Time(ctx)
		return nil
	})
	if err != nil && !redis.HasErrorPrefix(err, "WRONGTYPE") {
		return valueState{}, lockState{}, fmt.Errorf("herdguard: read: %w", err)
	}
	nowMs, err := serverMillis(clock)
	if err != nil {
		return valueState{}, lockState{}, fmt.Errorf("herdguard: read clock: %w", err)
	}
	l, err := lc.state(nowMs)
	if err != nil {
		return valueState{}, lockState{}, fmt.Errorf("herdguard: read lock: %w", err)
	}
	v, err := valueOf(rdb, o, key, kind, hash, vpttl)
	return v, l, err
}

func valueOf(rdb *redis.Client, o options, key string, kind *redis.StatusCmd, hash *redis.SliceCmd, pttl *redis.DurationCmd) (valueState, error) {
	k, err := kind.Result()
	switch {
	case err != nil:
		return valueState{}, fmt.Errorf("herdguard: read value: %w", err)
	case k == "none":
		return valueState{State: stateAbsent}, nil
	case k != "hash":
		return valueState{State: stateForeign}, nil
	}
	f, _ := hash.Result()
	ttl, _ := pttl.Result()
	v := valueState{TTLMillis: ttl.Milliseconds()}
	v.Fence, _ = strconv.ParseInt(str(f[2]), 10, 64)
	data, hasData := f[0].(string)
	if !hasData {
		v.State, v.Tombstone = stateTombstone, "invalidated"
		return v, nil
	}
	v.Bytes = len(data)
	if x, err := strconv.ParseInt(str(f[1]), 10, 64); err == nil {
		t := time.UnixMilli(x).UTC()
		v.Expires = &t
		v.State = stateStale
		if time.Now().Before(t) {
			v.State = stateFresh
		}
	} else {
		v.State = stateForeign
	}
	var why error
	store, err := rcache.NewRedis[[]byte](rdb, rcache.RedisOptions{Prefix: o.prefix, Namespace: o.pipeline,
		Codec: rawCodec{}, OnCorrupt: func(_ string, err error) { why = err }})
	if err != nil {
		return v, fmt.Errorf("herdguard: %w", err)
	}
	e, fr := store.Decode(key, []byte(data))
	if fr == cache.Miss {
		if why != nil {
			v.Undecodable = why.Error()
		}
		return v, nil
	}
	su, w := e.StaleUntil.UTC(), e.Written.UTC()
	v.StaleUntil, v.LoadMillis = &su, e.LoadDuration.Milliseconds()
	if !e.Written.IsZero() {
		v.Written = &w
	}
	if e.NotFound {
		v.State, v.Tombstone = stateTombstone, "not-found"
	}
	v.entryPayload = e.Value
	return v, nil
}
