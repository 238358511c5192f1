// Package evlog writes a pipeline's notable events to the user's logger:
// breaker transitions (each), and, rate-limited, fail-open episodes,
// refusals of Redis's ACL, corrupt entries, entries that did not
// decrypt, lost leases and panics of background work. Keys are never
// logged: they may be secrets.
package evlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/internal/aclcheck"
)

// quiet is how long a kind of event must have been quiet for the next
// one to be logged: an outage that makes every call fail open is logged
// once when it starts (and once more every minute it lasts), not per call.
const quiet = time.Minute

// Log writes one pipeline's notable events to Logger, if any. The zero
// value logs nothing. It is safe for concurrent use.
type Log struct {
	Logger   *slog.Logger
	Pipeline string // the pipeline's name, on every record
	// Unix nanoseconds of the last logged event of each kind.
	failOpen, denied, corrupt, leaseLost, panics atomic.Int64
}

// BreakerChange logs a breaker's transition: at level WARN when it opens,
// INFO otherwise. Transitions are few, and each is logged.
func (g *Log) BreakerChange(name string, from, to breaker.State) {
	if g.Logger == nil {
		return
	}
	level := slog.LevelInfo
	if to == breaker.Open {
		level = slog.LevelWarn
	}
	g.Logger.Log(context.Background(), level, "herdguard: breaker changed state",
		"pipeline", g.Pipeline, "breaker", name, "from", from.String(), "to", to.String())
}

// episode logs msg if its kind (last) has been quiet for quiet.
func (g *Log) episode(ctx context.Context, last *atomic.Int64, level slog.Level, msg string, attrs ...any) {
	if g.Logger == nil {
		return
	}
	now := time.Now().UnixNano()
	prev := last.Load()
	if prev != 0 && now-prev < int64(quiet) || !last.CompareAndSwap(prev, now) {
		return
	}
	g.Logger.Log(ctx, level, msg, append([]any{"pipeline", g.Pipeline}, attrs...)...)
}

// FailedOpen logs that a call went on without Redis: op is the operation
// that failed, why the reason the metrics give, err Redis's error, of
// which only the root cause is logged.
func (g *Log) FailedOpen(ctx context.Context, op, why string, err error) {
	if aclcheck.IsDenied(err) {
		// A misconfiguration, not an outage: an error of its own, logged
		// at its first occurrence even during an outage's quiet minute.
		g.episode(ctx, &g.denied, slog.LevelError,
			"herdguard: Redis refuses the pipeline's credentials or commands (ACL); calls go on without it until it is fixed (see Pipeline.Check)",
			"op", op, "reason", why, "error", rootCause(err).Error())
		return
	}
	g.episode(ctx, &g.failOpen, slog.LevelWarn, "herdguard: Redis failing; calls go on without it",
		"op", op, "reason", why, "error", rootCause(err).Error())
}

// rootCause is the innermost error of err's chain: what Redis or the
// network said, without the wrapping messages, which may name the key.
func rootCause(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}

// CorruptEntry logs unusable data in Redis, which the call treated as a
// miss.
func (g *Log) CorruptEntry(ctx context.Context) {
	g.episode(ctx, &g.corrupt, slog.LevelWarn, "herdguard: unusable data in Redis treated as a miss")
}

// DecryptFailed logs a value in Redis that did not decrypt, treated as a
// miss, with the reason (which names key ids, never keys or key
// material). It shares the corrupt entries' quiet minute.
func (g *Log) DecryptFailed(ctx context.Context, reason string) {
	g.episode(ctx, &g.corrupt, slog.LevelWarn, "herdguard: a value in Redis did not decrypt; treated as a miss",
		"reason", reason)
}

// LostLease logs a lock holder that lost its lease before writing its
// value back, which it then did not write.
func (g *Log) LostLease(ctx context.Context) {
	g.episode(ctx, &g.leaseLost, slog.LevelWarn, "herdguard: a lock holder lost its lease before writing back; value not written")
}

// Panicked logs a panic of background work, which has no caller to
// return it to: the panic's value, and the stack it was recovered with.
func (g *Log) Panicked(ctx context.Context, value any, stack []byte) {
	g.episode(ctx, &g.panics, slog.LevelError, "herdguard: background work panicked; the process goes on",
		"panic", fmt.Sprint(value), "stack", string(stack))
}
