package file

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/herdguard/herdguard/backend"
)

var _ backend.Shared = (*Shared)(nil)

// TryAcquire implements [backend.Shared]; see the package's documentation for
// the rules. It returns [backend.ErrNotAcquired] when a live holder has key, a
// [*backend.BackendError] when the directory fails, and an error matching
// ctx's when ctx ends first. The lease beats every heartbeat of the scope
// the view was opened with (or every third of the lease, if shorter), and
// declares itself dead two beats after its last one.
func (s *Shared) TryAcquire(ctx context.Context, key string, lease time.Duration) (*backend.Lease, error) {
	if lease <= 0 {
		return nil, fmt.Errorf("lock: acquire: lease must be positive, got %v", lease)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lock: acquire: %w", err)
	}
	h := hashName(key)
	lpath := filepath.Join(s.lockDir(), h+lockSuffix)
	spath := filepath.Join(s.lockDir(), h+".state")
	beat := max(min(s.heartbeat, lease/3), time.Millisecond)
	tok := randHex(16)
	var (
		fd       *os.File
		fence    int64
		tookOver bool
		busy     bool
	)
	// The flock is taken under the mutex, and every other flock of a lock
	// file is taken for a moment (flockFree, the sweep) or dropped (a
	// release) under it too: outside the mutex only holders have one. A
	// free flock is then a holder gone, and a grant has its flock from
	// its first moment, so that its holder's death is seen before its
	// first beat. Only a grant opens the lock file for writing: the
	// kernel's closing it, when the holder dies, wakes the key's
	// waiters (see watch_linux.go).
	err := s.withMutex(ctx, func() error {
		st, err := readState(spath)
		if err != nil {
			return err
		}
		now := nowMicro()
		switch {
		case st.foreign:
			tookOver = true
		case st.granted(now) && now-st.beat > st.dead:
			tookOver = true // it missed two beats
		case st.granted(now) && !st.flocked:
			busy = true // it proves it lives by its beats alone
			return nil
		case st.granted(now):
			gone, err := flockFree(lpath)
			if err != nil || !gone {
				busy = err == nil
				return err
			}
			tookOver = true // its process is gone, its flock with it
		}
		fd, err = s.openCreate(lpath, os.O_RDWR)
		if err != nil {
			return err
		}
		got, err := takeFlock(fd)
		if err == nil {
			fence, err = s.nextFenceLocked(key, st)
		}
		if err == nil {
			next := state{
				token:   tok,
				fence:   fence,
				expires: now + lease.Microseconds(),
				beat:    now,
				dead:    2 * beat.Microseconds(),
				flocked: got,
				pid:     os.Getpid(),
			}
			err = s.writeInPlace(spath, next.encode())
		}
		if err != nil {
			_ = fd.Close()
			fd = nil
		}
		return err
	})
	if err != nil || busy {
		if busy {
			return nil, backend.ErrNotAcquired
		}
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil, fmt.Errorf("lock: acquire: %w", err)
		}
		return nil, &backend.BackendError{Op: "acquire", Err: err}
	}
	s.heldMu.Lock()
	s.held[tok] = fd
	s.heldMu.Unlock()
	return backend.NewLease(s, backend.Grant{
		Key: key, Token: tok, Fence: fence, TTL: lease, Heartbeat: beat, TookOver: tookOver,
	}), nil
}

// takeFlock tries, under the mutex, for the flock of a grant's lock file
// fd. It reports false when a holder whose grant was taken over still has
// it, or when the file was swept or its directory removed after fd was
// opened (its flock would exclude nobody).
func takeFlock(fd *os.File) (bool, error) {
	got, err := tryFlock(fd)
	if err != nil || !got {
		return false, err
	}
	if !sameFile(fd) {
		_ = unflock(fd)
		return false, nil
	}
	return true, nil
}

// Inspect implements [backend.Shared]: key is held when its grant is
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
			gone, err = flockFree(filepath.Join(s.lockDir(), h+lockSuffix))
		}
		return err
	})
	if err != nil {
		return false, 0, &backend.BackendError{Op: "inspect", Err: err}
	}
	now := nowMicro()
	if !st.granted(now) || now-st.beat > st.dead || gone {
		return false, 0, nil
	}
	return true, time.Duration(st.expires-now) * time.Microsecond, nil
}

// Release implements [backend.Holder]: it clears key's grant if token holds
// it and drops the grant's flock, under the mutex. It wakes nobody but
// the waiters that the lock file's close wakes (on Linux): the pipeline
// notifies after a release.
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
		return &backend.BackendError{Op: "release", Err: err}
	}
	if !held {
		return backend.ErrNotHeld
	}
	return nil
}

// Extend implements [backend.Holder]: if token holds key, the lease is reset
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
			st.flocked = s.upgrade(token, filepath.Join(s.lockDir(), h+lockSuffix))
		}
		return s.writeInPlace(spath, st.encode())
	})
	if err != nil {
		return &backend.BackendError{Op: "extend", Err: err}
	}
	if lost {
		return backend.ErrNotHeld
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
