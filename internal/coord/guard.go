package coord

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/aclcheck"
	"github.com/herdguard/herdguard/internal/opbudget"
	"github.com/herdguard/herdguard/internal/redisbatch"
	"github.com/herdguard/herdguard/internal/slotreload"
)

// Guard bounds the pipeline's Redis operations: a breaker that opens
// on a failure rate, and the operation timeout, which the batcher that
// carries the commands (package internal/redisbatch) applies from when
// their round trip starts, so that it measures Redis and never the time a
// burst's commands spent waiting for their batch. Operations run on the caller's goroutine.
//
// The same guard bounds the operations on a [backend.Backend], whose calls carry
// no batcher: Deadline says so, and each operation then runs under
// context.WithTimeout(OpTimeout).
type Guard struct {
	Breaker   *breaker.Breaker
	OpTimeout time.Duration
	Deadline  bool
	Slots     *slotreload.Reloader // a Cluster client's slot map reload; nil otherwise
}

// Do runs one Redis operation through g. A nil g (the embedded
// default, no Redis) runs op as it is. The operation's error is classified
// once, by [Classify]: only infrastructure failures count against the
// breaker; a per-key data problem or a caller's cancellation does not.
func Do[T any](ctx context.Context, g *Guard, op func(context.Context) (T, error)) (T, error) {
	if g == nil {
		return op(ctx)
	}
	var v T
	var err error
	ran := false
	refused := g.Breaker.Execute(func() error {
		ran = true
		if g.Deadline {
			// The deadline bounds any backend as it is; one that counts
			// the timeout from when its request is sent, not while it
			// waits for its own pool, takes the caller's context and
			// the timeout back with backend.Budget.
			bctx := opbudget.With(ctx, ctx, g.OpTimeout)
			octx, cancel := context.WithTimeout(bctx, g.OpTimeout)
			v, err = op(octx)
			cancel()
		} else if _, ok := ctx.Deadline(); ok {
			// The timeout travels with the command into its batch (see
			// batcher), which starts counting it when the round trip
			// does, in place of what is left of ctx's deadline.
			v, err = op(redisbatch.WithBudget(ctx, &g.OpTimeout))
		} else {
			// Without a deadline, the batcher gives the command its own
			// timeout, which is the operation timeout.
			v, err = op(ctx)
		}
		switch Classify(ctx, err) {
		case Infra:
			g.Slots.Failed()
			return err
		case Canceled:
			return breaker.Ignore
		}
		return nil // a reply: Redis answered
	})
	if !ran {
		g.Slots.Failed()
		var zero T
		return zero, refused
	}
	return v, err
}

// Class is what an error means to the pipeline; [Classify] decides it,
// in one place, for every error a stage meets.
type Class uint8

const (
	// None: no error, or an answer rather than a failure (another
	// holder has the lock, a write refused by a newer fence, a lease found
	// lost).
	None Class = iota
	// Canceled: the caller's (or the shared load's) own context ended.
	// Counts nowhere.
	Canceled
	// Data: a problem with one key's data: bytes or types that this
	// module did not write, a value the codec cannot encode, an error
	// reply about one key. The key is treated as a miss and counted; the
	// Redis breaker never hears of it, so one bad key cannot make every
	// other key fail open.
	Data
	// Infra: Redis or the path to it failed (connection refused or
	// broken, no reply in time, a server not ready to serve). Counts
	// against the Redis breaker; the call fails open.
	Infra
	// Refused: the Redis breaker is open; the operation did not run.
	Refused
)

// infraReplies are the Redis error replies that say the server, not the
// key, is in trouble.
var infraReplies = []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY",
	"NOAUTH", "NOPERM", "WRONGPASS", "OOM", "MISCONF", "NOREPLICAS", "UNBLOCKED", "ERR max number of clients"}

// Classify decides what err from a Redis operation run under ctx means.
// Loader errors are not classified here: they go to the loader's breaker
// and the fallback chain (see resilience's Builder.IsFailure).
func Classify(ctx context.Context, err error) Class {
	switch {
	case err == nil, errors.Is(err, backend.ErrNotAcquired), errors.Is(err, backend.ErrNotHeld),
		errors.Is(err, cache.ErrExpiredEntry), errors.Is(err, backend.ErrLockLost):
		return None
	case IsRefusal(err):
		return Refused
	case ctx.Err() != nil:
		return Canceled
	case errors.Is(err, cache.ErrCodec):
		return Data
	}
	return classifyReply(err)
}

// IsRefusal reports whether err is a breaker refusing to run an
// operation: open, or out of probes.
func IsRefusal(err error) bool {
	return errors.Is(err, breaker.ErrOpen) || errors.Is(err, breaker.ErrTooManyProbes)
}

// classifyReply is Classify for an error that may be a Redis error reply;
// apart, so that the call without an error allocates nothing.
func classifyReply(err error) Class {
	var re redis.Error
	if errors.As(err, &re) && !errors.Is(err, redis.ErrClosed) {
		if aclcheck.IsDenied(err) { // the ACL refused a command inside a script
			return Infra
		}
		for _, prefix := range infraReplies {
			if redis.HasErrorPrefix(re, prefix) {
				return Infra
			}
		}
		return Data
	}
	return Infra
}

// BatchFailure sorts a batch's failures of the service, failed of n items:
// whole is the first when every item failed so, the batch's failure,
// which the guard counts; part is the first when only some did. A batch
// that Redis answered in part (one of its round trips late behind other
// processes' work) is no failure of Redis's: the items it did not answer
// fail open alone, and the others keep their answers.
func BatchFailure(failed []error, n int) (whole, part error) {
	switch {
	case len(failed) == 0:
		return nil, nil
	case len(failed) == n:
		return failed[0], nil
	}
	return nil, failed[0]
}
