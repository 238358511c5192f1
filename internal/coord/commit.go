package coord

import (
	"context"
	"errors"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/cache"
	"github.com/herdguard/herdguard/internal/rcache"
)

// Fate is what became of one write of a batch's commit ([CommitBatch]).
type Fate uint8

const (
	// Stored: the entry was written, and the commit released its lease.
	Stored Fate = iota
	// Outdated: a newer fence wrote the key first; the entry was not
	// written, and the commit released the lease.
	Outdated
	// LeaseLost: the lease was gone (taken over, or lost with Redis's
	// keys); nothing was written, and there is nothing to release.
	LeaseLost
	// Expired: the entry's grace ended while it loaded; nothing was
	// written.
	Expired
	// Corrupt: a problem with the key's data (an entry the codec cannot
	// encode, an error reply about the key); nothing was written.
	Corrupt
	// Failed: the service failed for this write, or for the whole batch;
	// the write fails open.
	Failed
)

// Held reports whether a write that met f still holds its lease, if it
// has one: neither released by the commit nor lost. Such a lease is
// the caller's to release.
func (f Fate) Held() bool { return f >= Expired }

// Committed is one write's answer from [CommitBatch]: its fate, and the
// error behind it (nil when Stored or Outdated).
type Committed struct {
	Fate Fate
	Err  error
}

// committer is the part of the seam a batch's commit runs on.
type committer[V any] interface {
	CommitMany(ctx context.Context, writes []rcache.Write[V]) ([]rcache.Written, error)
}

// CommitBatch runs co's CommitMany of writes through g, and returns each
// write's answer (the i-th is writes[i]'s) and the batch's failure as a
// whole. The batch fails as a whole when the call did, or when the
// service failed every write (see [BatchFailure]): only then does the
// guard count it, and every write meets that error. Writes the service
// did not answer, in a batch it answered in part, fail open alone.
func CommitBatch[V any](ctx context.Context, g *Guard, co committer[V], writes []rcache.Write[V]) ([]Committed, error) {
	ws, whole := Do(ctx, g, func(ctx context.Context) ([]rcache.Written, error) {
		ws, err := co.CommitMany(ctx, writes)
		if err != nil {
			return nil, err
		}
		var failed []error
		for _, w := range ws {
			if w.Err != nil && Classify(ctx, w.Err) == Infra {
				failed = append(failed, w.Err)
			}
		}
		whole, _ := BatchFailure(failed, len(ws))
		return ws, whole
	})
	answers := make([]Committed, len(writes))
	for i := range answers {
		w := rcache.Written{Err: whole}
		if whole == nil {
			w = ws[i]
		}
		answers[i] = Committed{Fate: FateOf(ctx, w), Err: w.Err}
	}
	return answers, whole
}

// FateOf is what became of the write whose answer is w, under ctx: a
// batch's, or one key's (a plain write that was not stored met a newer
// fence: Outdated).
func FateOf(ctx context.Context, w rcache.Written) Fate {
	switch {
	case errors.Is(w.Err, backend.ErrLockLost):
		return LeaseLost
	case w.Err == nil && w.Stored:
		return Stored
	case w.Err == nil:
		return Outdated
	case errors.Is(w.Err, cache.ErrExpiredEntry):
		return Expired
	case Classify(ctx, w.Err) == Data:
		return Corrupt
	}
	return Failed
}
