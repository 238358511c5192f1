package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const (
	// cleanupTimeout bounds each token-checked release that follows an
	// acquire whose outcome is unknown.
	cleanupTimeout = time.Second
	// lockWait bounds how long a statement waits for a row lock
	// (lock_timeout, set by the functions): past it, a statement whose
	// client gave up can no longer grant the lock.
	lockWait = time.Second
)

// TryAcquire implements [backend.Shared] in one statement (one round trip),
// which concurrent calls on one [Backend] share (see batcher):
// it takes key's lock, or takes it over from a holder whose last beat is
// older than two of its beats ([backend.Lease.TookOver]), with a fence above
// every earlier grant and write of key. It returns [backend.ErrNotAcquired]
// when a live holder has key, a [*backend.BackendError] when the database
// fails, and an error matching ctx's when ctx ends first.
//
// When the outcome is unknown (ctx ended or the connection broke while
// the statement was in flight), the lock is released by its token on a
// goroutine of its own, so that no lock is orphaned: at once, and, if the
// token did not hold it yet, again once the statement can no longer have
// waited for the row (the server may still be running it: it does not
// notice at once that its client left). Close waits for it, two seconds
// at most. If the database cannot be reached for it, the lock never beats
// and is taken over two beats later.
func (s *shared) TryAcquire(ctx context.Context, key string, lease time.Duration) (*backend.Lease, error) {
	if key == "" || lease <= 0 {
		return nil, errors.New("lock: acquire: key must not be empty and lease must be positive")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lock: acquire: %w", err)
	}
	if err := s.b.ready(ctx); err != nil {
		return nil, s.lockErr(ctx, "acquire", err)
	}
	tok := newToken()
	start := time.Now()
	beat := min(s.heartbeat, lease/3)
	cctx, r := s.b.acquire(ctx, &acquireCall{ns: s.ns, key: rowKey(key), token: tok,
		leaseUS: lease.Microseconds(), beatUS: max(beat.Microseconds(), 1)})
	fence, how, err := r.fence, r.how, r.err
	if err != nil {
		if !known(err) {
			s.cleanups.Add(1)
			go func() { // ends with the release, bounded by cleanupTimeout
				defer s.cleanups.Done()
				s.cleanup(key, tok, start)
			}()
		}
		return nil, s.lockErr(cctx, "acquire", err)
	}
	if fence <= 0 {
		return nil, backend.ErrNotAcquired
	}
	return backend.NewLease(s, backend.Grant{Key: key, Token: tok, Fence: fence, TTL: lease,
		Heartbeat: beat, TookOver: how == 2}), nil
}

// TryAcquireMany implements [backend.SharedMany]: TryAcquire of each
// of keys, whose acquires go to the statements of acquires (see batcher)
// all at once.
func (s *shared) TryAcquireMany(ctx context.Context, keys []string, lease time.Duration) ([]*backend.Lease, []error) {
	leases, errs := make([]*backend.Lease, len(keys)), make([]error, len(keys))
	fail := func(err error) ([]*backend.Lease, []error) {
		for i := range errs {
			errs[i] = err
		}
		return leases, errs
	}
	if lease <= 0 {
		return fail(errors.New("lock: acquire: lease must be positive"))
	}
	if err := ctx.Err(); err != nil {
		return fail(fmt.Errorf("lock: acquire: %w", err))
	}
	if err := s.b.ready(ctx); err != nil {
		return fail(s.lockErr(ctx, "acquire", err))
	}
	start := time.Now()
	beat := min(s.heartbeat, lease/3)
	bu := budgetOf(ctx)
	calls := make([]*acquireCall, len(keys))
	for i, k := range keys {
		if k == "" {
			errs[i] = errors.New("lock: acquire: key must not be empty")
			continue
		}
		calls[i] = &acquireCall{ns: s.ns, key: rowKey(k), token: newToken(), leaseUS: lease.Microseconds(),
			beatUS: max(beat.Microseconds(), 1), budget: bu, done: make(chan acquireResult, 1)}
	}
	sent := make([]*acquireCall, 0, len(calls))
	for _, c := range calls {
		if c != nil {
			sent = append(sent, c)
		}
	}
	s.b.acquires.addAll(sent)
	for i, c := range calls {
		if c == nil {
			continue
		}
		var r acquireResult
		select {
		case r = <-c.done:
		case <-bu.caller.Done():
			r = acquireResult{err: bu.caller.Err()}
		}
		switch {
		case r.err != nil:
			if !known(r.err) {
				s.cleanups.Add(1)
				go func() { // ends with the release, bounded by cleanupTimeout
					defer s.cleanups.Done()
					s.cleanup(keys[i], c.token, start)
				}()
			}
			errs[i] = s.lockErr(bu.caller, "acquire", r.err)
		case r.fence <= 0:
			errs[i] = backend.ErrNotAcquired
		default:
			leases[i] = backend.NewLease(s, backend.Grant{Key: keys[i], Token: c.token, Fence: r.fence, TTL: lease,
				Heartbeat: beat, TookOver: r.how == 2})
		}
	}
	return leases, errs
}

// cleanup releases key's lock if tok holds it, on contexts of its own:
// the caller's may be the very reason the outcome is unknown. An acquire
// sent at start may still be waiting for the row, up to lockWait: when
// the first release finds the token not holding the lock, a second one
// follows past that.
func (s *shared) cleanup(key, tok string, start time.Time) {
	release := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		return s.Release(ctx, key, tok)
	}
	if err := release(); !errors.Is(err, backend.ErrNotHeld) {
		return // released, or the database fails: the take-over covers it
	}
	time.Sleep(time.Until(start.Add(lockWait + 100*time.Millisecond)))
	_ = release()
}

// Inspect implements [backend.Shared].
func (s *shared) Inspect(ctx context.Context, key string) (bool, time.Duration, error) {
	if err := s.b.ready(ctx); err != nil {
		return false, 0, s.lockErr(ctx, "inspect", err)
	}
	var us int64
	rk := rowKey(key)
	cctx, err := s.b.queryRow(ctx, s.b.q.inspect, []any{s.ns, rk}, &us)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, s.lockErr(cctx, "inspect", err)
	}
	return true, time.Duration(max(us, 0)) * time.Microsecond, nil
}

// Release implements [backend.Holder]: it clears key's holder if token still
// holds it, and wakes key's waiters in every process either way, in one
// statement.
func (s *shared) Release(ctx context.Context, key, token string) error {
	rk := rowKey(key)
	var n int64
	cctx, err := s.b.queryRow(ctx, s.b.q.release, []any{s.ns, rk, token, s.channel, wakePayload(rk)}, &n)
	if err != nil {
		return s.lockErr(cctx, "release", err)
	}
	if n == 0 {
		return backend.ErrNotHeld
	}
	return nil
}

// Extend implements [backend.Holder]: it resets key's lease to ttl from now
// and records a beat, if token still holds it. Concurrent calls on one
// [Backend] share a statement (see extender).
func (s *shared) Extend(ctx context.Context, key, token string, ttl time.Duration) error {
	if err := s.b.ready(ctx); err != nil {
		return s.lockErr(ctx, "extend", err)
	}
	err := s.b.ext.extend(ctx, s.ns, rowKey(key), token, ttl)
	switch {
	case err == nil || errors.Is(err, backend.ErrNotHeld):
		return err
	case ctx.Err() != nil:
		return fmt.Errorf("lock: extend: %w", ctx.Err())
	}
	return s.lockErr(ctx, "extend", err)
}

// lockErr returns the context's error when ctx has ended, and a
// [*backend.BackendError] otherwise.
func (s *shared) lockErr(ctx context.Context, op string, err error) error {
	s.b.lost(err)
	return lockErr(ctx, op, err)
}

// lockErr names the operation, never the key: keys may be secrets.
func lockErr(ctx context.Context, op string, err error) error {
	if cerr := ctxErr(ctx); cerr != nil {
		return fmt.Errorf("lock: %s: %w", op, cerr)
	}
	return &backend.BackendError{Op: op, Err: err}
}

// known reports whether err came from the server, which means the
// statement ran (and failed) or was refused: its outcome is known.
// Anything else (a broken connection, a cancelled context) leaves it
// unknown.
func known(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return true
	}
	// Errors raised before anything was sent (no connection could be
	// had) leave nothing behind either.
	return pgconn.SafeToRetry(err)
}

// newToken returns a random token that identifies one grant.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
