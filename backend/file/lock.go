package file

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/herdguard/herdguard/lock"
)

var _ lock.Locker = (*Shared)(nil)

// TryAcquire implements [lock.Locker]; see the package's documentation for
// the rules. It returns [lock.ErrNotAcquired] when a live holder has key, a
// [*lock.BackendError] when the directory fails, and an error matching
// ctx's when ctx ends first. The lease beats every heartbeat of the scope
// the view was opened with (or every third of the lease, if shorter), and
// declares itself dead two beats after its last one.
func (s *Shared) TryAcquire(ctx context.Context, key string, lease time.Duration) (*lock.Lease, error) {
	if lease <= 0 {
		return nil, fmt.Errorf("lock: acquire %q: lease must be positive, got %v", key, lease)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lock: acquire %q: %w", key, err)
	}
	h := hashName(key)
	lpath := filepath.Join(s.lockDir(), h+".lock")
	spath := filepath.Join(s.lockDir(), h+".state")
	fd, err := s.openCreate(lpath, os.O_RDWR)
	if err != nil {
		return nil, &lock.BackendError{Op: "acquire", Err: err}
	}
	beat := max(min(s.heartbeat, lease/3), time.Millisecond)
	tok := randHex(16)
	var (
		fence    int64
		tookOver bool
		busy     bool
		granted  bool
		ran      bool
	)
	err = s.withMutex(ctx, func() error {
		ran = true
		// The flock is tried under the mutex, and every other flock of
		// the lock file taken for a moment (a losing TryAcquire's, the
		// sweep's) or dropped on release is too: outside the mutex only
		// holders have it. A free flock then means that the grant's
		// holder is gone, and a grant made here has the flock from its
		// first moment, so that its holder's death is seen before its
		// first beat.
		defer func() {
			if !granted {
				_ = fd.Close()
			}
		}()
		got, err := tryFlock(fd)
		if err != nil {
			return err
		}
		if got && !sameFile(fd) {
			// The file was swept or its directory removed after we
			// opened it: its flock excludes nobody.
			_ = unflock(fd)
			got = false
		}
		st, err := readState(spath)
		if err != nil {
			return err
		}
		now := nowMicro()
		switch {
		case st.foreign:
			tookOver = true
		case st.granted(now):
			if !(st.flocked && got) && now-st.beat <= st.dead {
				busy = true
				return nil
			}
			// Its process is gone (its flock with it), or it missed two
			// beats.
			tookOver = true
		}
		fence, err = s.nextFenceLocked(key, st)
		if err != nil {
			return err
		}
		next := state{
			token:   tok,
			fence:   fence,
			expires: now + lease.Microseconds(),
			beat:    now,
			dead:    2 * beat.Microseconds(),
			flocked: got,
			pid:     os.Getpid(),
		}
		if err := s.writeInPlace(spath, next.encode()); err != nil {
			return err
		}
		granted = true
		return nil
	})
	if !ran {
		_ = fd.Close() // the mutex was not had
	}
	if err != nil || busy {
		if busy {
			return nil, lock.ErrNotAcquired
		}
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil, fmt.Errorf("lock: acquire %q: %w", key, err)
		}
		return nil, &lock.BackendError{Op: "acquire", Err: err}
	}
	s.heldMu.Lock()
	s.held[tok] = fd
	s.heldMu.Unlock()
	return lock.NewLease(s, lock.Grant{
		Key: key, Token: tok, Fence: fence, TTL: lease, Heartbeat: beat, TookOver: tookOver,
	}), nil
}

// Inspect implements [lock.Locker]: key is held when its grant is
// unexpired, its holder beat within the time it declared, and its process
// lives (a grant with the flock whose flock is free has none).
func (s *Shared) Inspect(ctx context.Context, key string) (bool, time.Duration, error) {
	h := hashName(key)
	var (
		st   state
		gone bool
	)
	err := s.withMutex(ctx, func() error {
		var err error
		st, err = readState(filepath.Join(s.lockDir(), h+".state"))
		if err == nil && st.flocked {
			gone, err = flockFree(filepath.Join(s.lockDir(), h+".lock"))
		}
		return err
	})
	if err != nil {
		return false, 0, &lock.BackendError{Op: "inspect", Err: err}
	}
	now := nowMicro()
	if !st.granted(now) || now-st.beat > st.dead || gone {
		return false, 0, nil
	}
	return true, time.Duration(st.expires-now) * time.Microsecond, nil
}

// Release implements [lock.Holder]: it clears key's grant if token holds
// it and drops the grant's flock, under the mutex. It wakes nobody: the pipeline notifies
// after a release.
func (s *Shared) Release(ctx context.Context, key, token string) error {
	spath := filepath.Join(s.lockDir(), hashName(key)+".state")
	held := false
	err := s.withMutex(ctx, func() error {
		// The flock goes under the mutex (see TryAcquire), after the
		// state no longer names this grant.
		defer s.dropHeld(token)
		st, err := readState(spath)
		if err != nil {
			return err
		}
		if st.token != token {
			return nil
		}
		held = st.granted(nowMicro())
		st.token, st.flocked, st.pid = "", false, 0
		return s.writeInPlace(spath, st.encode())
	})
	s.dropHeld(token) // if the mutex was not had
	if err != nil {
		return &lock.BackendError{Op: "release", Err: err}
	}
	if !held {
		return lock.ErrNotHeld
	}
	return nil
}

// Extend implements [lock.Holder]: if token holds key, the lease is reset
// to ttl from now and the beat recorded. A holder that took the lock over
// from a stopped one, and so has no flock yet, tries for it again.
func (s *Shared) Extend(ctx context.Context, key, token string, ttl time.Duration) error {
	h := hashName(key)
	spath := filepath.Join(s.lockDir(), h+".state")
	lost := false
	err := s.withMutex(ctx, func() error {
		st, err := readState(spath)
		if err != nil {
			return err
		}
		now := nowMicro()
		if st.token != token || !st.granted(now) {
			lost = true
			s.dropHeld(token) // under the mutex, as in Release
			return nil
		}
		st.expires, st.beat = now+ttl.Microseconds(), now
		if !st.flocked {
			st.flocked = s.upgrade(token, filepath.Join(s.lockDir(), h+".lock"))
		}
		return s.writeInPlace(spath, st.encode())
	})
	if err != nil {
		return &lock.BackendError{Op: "extend", Err: err}
	}
	if lost {
		return lock.ErrNotHeld
	}
	return nil
}

// flockFree reports whether nobody has the flock of the lock file at
// lpath (or there is no such file), taking it for a moment: called under
// the mutex, like every other flock that is not a holder's.
func flockFree(lpath string) (bool, error) {
	f, err := os.Open(lpath)
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	return tryFlock(f)
}

// upgrade tries to take the lock file's flock for the grant of token,
// opening the file again if the one it has was removed.
func (s *Shared) upgrade(token, lpath string) bool {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	fd := s.held[token]
	if fd == nil || !sameFile(fd) {
		if fd != nil {
			_ = fd.Close()
			delete(s.held, token)
		}
		nfd, err := s.openCreate(lpath, os.O_RDWR)
		if err != nil {
			return false
		}
		fd = nfd
		s.held[token] = fd
	}
	ok, err := tryFlock(fd)
	return err == nil && ok && sameFile(fd)
}

// dropHeld closes the lock file of token's grant, dropping its flock.
func (s *Shared) dropHeld(token string) {
	if token == "" {
		return
	}
	s.heldMu.Lock()
	fd := s.held[token]
	delete(s.held, token)
	s.heldMu.Unlock()
	if fd != nil {
		_ = fd.Close()
	}
}
