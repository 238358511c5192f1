package resilience

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/telemetry"
)

// aclRule is the documented ACL for a herdguard user (docs/security.md).
const aclRule = "on >pw resetkeys ~hg:* resetchannels &hg:* -@all +@connection +evalsha +script|load +hget +del +publish +subscribe +unsubscribe +type +hmget +hset +pexpire +pttl +get +set +time"

// TestACL_documentedRuleIsEnough runs every Redis path of a pipeline with
// Lock and Encrypt (a cold miss: look, lock, write-back, release and
// announce; a waiter woken by the announcement; an L2 hit; an
// invalidation) as a user limited to the documented rule: nothing fails
// open. Without one of its commands, calls fail open.
func TestACL_documentedRuleIsEnough(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		rule     string
		failOpen bool
	}{
		{"documented", aclRule, false},
		{"without evalsha", strings.Replace(aclRule, " +evalsha", "", 1), true},
		// The rule documented before the scripts were loaded by SCRIPT
		// LOAD: the body goes with EVAL instead.
		{"eval for script load", strings.Replace(aclRule, "+script|load", "+eval", 1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Each rule meets a Redis that knows none of the scripts.
			if err := srv.Client().ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			user := "hg" + strings.ReplaceAll(tc.name, " ", "")
			if err := srv.Client().Do(ctx, append([]any{"ACL", "SETUSER", user, "reset"}, fields(tc.rule)...)...).Err(); err != nil {
				t.Fatal(err)
			}
			client := func() *redis.Client {
				return srv.Client(func(o *redis.Options) { o.Username, o.Password = user, "pw" })
			}
			ring := mustRing(t, testKey(1, 0))
			rec := newTelRec(t)
			pod := func() *Pipeline[string] {
				return build(t, New[string]("acl-"+user).Cache(time.Minute).Redis(client()).TracerProvider(rec.tp).
					RedisOptions(RedisOptions{OpTimeout: time.Second, Encrypt: ring}).
					Lock(LockSettings{Poll: time.Minute, MaxWait: 5 * time.Second}))
			}
			a, b := pod(), pod()
			gate, loading := make(chan struct{}), make(chan struct{})
			done := make(chan Result[string], 1)
			go func() {
				r, _ := a.GetResult(ctx, "k", func(context.Context, string) (string, error) {
					close(loading)
					<-gate
					return "v", nil
				})
				done <- r
			}()
			<-loading
			waiter := make(chan Result[string], 1)
			go func() {
				r, _ := b.GetResult(ctx, "k", func(context.Context, string) (string, error) { return "", errors.New("loaded twice") })
				waiter <- r
			}()
			// The waiter found the lock held, subscribed, and waits (or,
			// failing open, returned).
			waitFor(t, func() bool { return rec.startedNamed(telemetry.SpanLockWait) == 1 || len(waiter) == 1 })
			close(gate)
			ra, rb := <-done, <-waiter
			rc, errc := pod().GetResult(ctx, "k", okLoad)
			errInv := a.Invalidate(ctx, "k")
			ok := !ra.FailedOpen && ra.Source == SourceLoader && !rb.FailedOpen && rb.Source == SourceWaited &&
				errc == nil && rc.Source == SourceL2 && errInv == nil && a.Health().Subscribed
			if ok == tc.failOpen {
				t.Fatalf("winner %+v, waiter %+v, third %+v %v, invalidate %v, subscribed %v; want failed open: %v",
					ra, rb, rc, errc, errInv, a.Health().Subscribed, tc.failOpen)
			}
		})
	}
}

func fields(s string) []any {
	var out []any
	for _, f := range strings.Fields(s) {
		out = append(out, f)
	}
	return out
}
