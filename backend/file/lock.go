package file

import (
	"context"
	"errors"
	"fmt"
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
	got, err := tryFlock(fd)
	if err != nil {
		_ = fd.Close()
		return nil, &lock.BackendError{Op: "acquire", Err: err}
	}
	beat := max(min(s.heartbeat, lease/3), time.Millisecond)
	tok := randHex(16)
	var (
		fence    int64
		tookOver bool
		busy     bool
	)
	err = s.withMutex(ctx, func() error {
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
		return s.writeInPlace(spath, next.encode())
	})
	if err != nil || busy {
		_ = fd.Close()
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
// unexpired and its holder beat within the time it declared.
func (s *Shared) Inspect(ctx context.Context, key string) (bool, time.Duration, error) {
	var st state
	err := s.withMutex(ctx, func() error {
		var err error
		st, err = readState(filepath.Join(s.lockDir(), hashName(key)+".state"))
		return err
	})
	if err != nil {
		return false, 0, &lock.BackendError{Op: "inspect", Err: err}
	}
	now := nowMicro()
	if !st.granted(now) || now-st.beat > st.dead {
		return false, 0, nil
	}
	return true, time.Duration(st.expires-now) * time.Microsecond, nil
}

// Release implements [lock.Holder]: it clears key's grant if token holds
// it and drops the grant's flock. It wakes nobody: the pipeline notifies
// after a release.
func (s *Shared) Release(ctx context.Context, key, token string) error {
	spath := filepath.Join(s.lockDir(), hashName(key)+".state")
	held := false
	err := s.withMutex(ctx, func() error {
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
	if err != nil {
		return &lock.BackendError{Op: "release", Err: err}
	}
	s.dropHeld(token)
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
		s.dropHeld(token)
		return lock.ErrNotHeld
	}
	return nil
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
