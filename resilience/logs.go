package resilience

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/herdguard/herdguard/breaker"
)

// logQuiet is how long a kind of event must have been quiet for the next
// one to be logged: an outage that makes every call fail open is logged
// once when it starts (and once more every minute it lasts), not per call.
const logQuiet = time.Minute

// logs writes the pipeline's notable events to the user's logger, if any:
// breaker transitions (each), and, rate-limited, fail-open episodes,
// corrupt entries and lost leases. Keys are never logged: they may be
// secrets. The zero value logs nothing. It is safe for concurrent use.
type logs struct {
	l        *slog.Logger
	pipeline string
	// Unix nanoseconds of the last logged event of each kind.
	failOpen, denied, corrupt, leaseLost, panics atomic.Int64
}

func (g *logs) breakerChange(name string, from, to breaker.State) {
	if g.l == nil {
		return
	}
	level := slog.LevelInfo
	if to == breaker.Open {
		level = slog.LevelWarn
	}
	g.l.Log(context.Background(), level, "herdguard: breaker changed state",
		"pipeline", g.pipeline, "breaker", name, "from", from.String(), "to", to.String())
}

// episode logs msg if its kind (last) has been quiet for logQuiet.
func (g *logs) episode(ctx context.Context, last *atomic.Int64, level slog.Level, msg string, attrs ...any) {
	if g.l == nil {
		return
	}
	now := time.Now().UnixNano()
	prev := last.Load()
	if prev != 0 && now-prev < int64(logQuiet) || !last.CompareAndSwap(prev, now) {
		return
	}
	g.l.Log(ctx, level, msg, append([]any{"pipeline", g.pipeline}, attrs...)...)
}

func (g *logs) failedOpen(ctx context.Context, op, why string, err error) {
	if isDenied(err) {
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

func (g *logs) corruptEntry(ctx context.Context) {
	g.episode(ctx, &g.corrupt, slog.LevelWarn, "herdguard: unusable data in Redis treated as a miss")
}

func (g *logs) lostLease(ctx context.Context) {
	g.episode(ctx, &g.leaseLost, slog.LevelWarn, "herdguard: a lock holder lost its lease before writing back; value not written")
}

// panicked logs a panic of background work, which has no caller to
// return it to, with its stack.
func (g *logs) panicked(ctx context.Context, pe *PanicError) {
	g.episode(ctx, &g.panics, slog.LevelError, "herdguard: background work panicked; the process goes on",
		"panic", fmt.Sprint(pe.Value), "stack", string(pe.Stack))
}
