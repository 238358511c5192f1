package coord

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/cache"
)

// TestClassify: each kind of error a stage meets has one class; an
// answer is none, a breaker's refusal is refused, an error under a
// context that ended is canceled, a codec's error or an error reply about
// one key is data, and the rest (a server in trouble, no reply) is infra.
func TestClassify(t *testing.T) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	live := context.Background()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want Class
	}{
		{"nil", live, nil, None},
		{"not acquired", live, backend.ErrNotAcquired, None},
		{"not held", live, fmt.Errorf("extend: %w", backend.ErrNotHeld), None},
		{"lock lost", live, backend.ErrLockLost, None},
		{"expired entry", live, cache.ErrExpiredEntry, None},
		{"breaker open", live, breaker.ErrOpen, Refused},
		{"too many probes", ended, breaker.ErrTooManyProbes, Refused},
		{"caller left", ended, errors.New("i/o timeout"), Canceled},
		{"codec", live, fmt.Errorf("decode: %w", cache.ErrCodec), Data},
		{"error reply about a key", live, reply("WRONGTYPE Operation against a key holding the wrong kind of value"), Data},
		{"server loading", live, reply("LOADING Redis is loading the dataset in memory"), Infra},
		{"closed client", live, redis.ErrClosed, Infra},
		{"no reply", live, errors.New("dial tcp: connection refused"), Infra},
	} {
		if got := Classify(tc.ctx, tc.err); got != tc.want {
			t.Errorf("%s: Classify(%v) = %d, want %d", tc.name, tc.err, got, tc.want)
		}
	}
}

// TestWant_takes: a look takes a fresh entry; a refresh's, only one
// written more than writtenSlack after the copy that called for it.
func TestWant_takes(t *testing.T) {
	after := time.Now()
	soon, later := after.Add(writtenSlack/2), after.Add(2*writtenSlack)
	for _, tc := range []struct {
		name    string
		w       Want
		written time.Time
		f       cache.Freshness
		want    bool
	}{
		{"fresh", Want{}, after, cache.Fresh, true},
		{"stale", Want{}, later, cache.Stale, false},
		{"miss", Want{}, later, cache.Miss, false},
		{"refresh, the same write", Want{Refresh: true, After: after}, soon, cache.Fresh, false},
		{"refresh, a newer write", Want{Refresh: true, After: after}, later, cache.Fresh, true},
	} {
		if got := tc.w.Takes(&tc.written, tc.f); got != tc.want {
			t.Errorf("%s: Takes = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// reply is an error reply of Redis's, as go-redis returns it.
type reply string

func (r reply) Error() string { return string(r) }
func (reply) RedisError()     {}
