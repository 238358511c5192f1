package file

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/herdguard/herdguard/backend"
)

var _ backend.Store = (*Shared)(nil)

// Load implements [backend.Store]: it reads key's value file without any
// lock (values are replaced by rename), and returns nil for none, for one
// past its until, and for a file that holds another key or foreign bytes.
func (s *Shared) Load(ctx context.Context, key string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	v, ok, err := readValue(filepath.Join(s.valueDir(), hashName(key)), key)
	if err != nil {
		return nil, fmt.Errorf("file: load: %w", err)
	}
	if !ok || v.expired(time.Now()) {
		return nil, nil
	}
	return v.data, nil
}

// storedFence returns the fence of key's stored value, 0 for none: only
// the file's header is read.
func storedFence(path, key string) (int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var h [valueHeader]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return 0, nil // short: foreign
	}
	n := int(binary.BigEndian.Uint32(h[valueHeader-4:]))
	if n != len(key) {
		return 0, nil
	}
	k := make([]byte, n)
	if _, err := io.ReadFull(f, k); err != nil {
		return 0, nil
	}
	v, err := decodeValue(append(h[:], k...))
	if err != nil || v.key != key {
		return 0, nil
	}
	return v.fence, nil
}

// Save implements [backend.Store]. Under the namespace's mutex it checks
// s.Token against key's grant (a lost grant returns an error matching
// [backend.ErrLockLost] and writes nothing), applies the fence rule (a write
// below the stored fence, or without a lock over a locked write, is
// refused), writes by rename, and with s.Release releases the grant. A
// release, or a write without a token, then wakes key's waiters.
func (s *Shared) Save(ctx context.Context, key string, raw []byte, w backend.Save) (bool, error) {
	if w.Fence < 0 {
		return false, errors.New("file: save: negative fence")
	}
	h := hashName(key)
	vpath := filepath.Join(s.valueDir(), h)
	spath := filepath.Join(s.lockDir(), h+".state")
	var stored, released bool
	err := s.withMutex(ctx, func() error {
		now := time.Now()
		if w.Token != "" {
			st, err := readState(spath)
			if err != nil {
				return err
			}
			if st.token != w.Token || !st.granted(now.UnixMicro()) {
				s.dropHeld(w.Token) // under the mutex (see TryAcquire)
				return backend.ErrLockLost
			}
		}
		cur, ok, err := readValue(vpath, key)
		if err != nil {
			return err
		}
		if !ok || cur.expired(now) || w.Fence >= cur.fence {
			if w.Until.IsZero() || w.Until.After(now) {
				var until int64
				if !w.Until.IsZero() {
					until = w.Until.UnixNano()
				}
				if err := s.writeAtomic(vpath, encodeValue(value{fence: w.Fence, until: until, key: key, data: raw})); err != nil {
					return err
				}
				stored = true
			}
		}
		if w.Token != "" && w.Release {
			st, err := readState(spath)
			if err != nil {
				return err
			}
			st.token, st.flocked, st.pid = "", false, 0
			if err := s.writeInPlace(spath, st.encode()); err != nil {
				return err
			}
			s.dropHeld(w.Token) // under the mutex (see TryAcquire)
			released = true
		}
		return nil
	})
	if errors.Is(err, backend.ErrLockLost) {
		return false, fmt.Errorf("file: save: %w", backend.ErrLockLost)
	}
	if err != nil {
		return false, fmt.Errorf("file: save: %w", err)
	}
	if released || (stored && w.Token == "") {
		_ = s.Notify(ctx, key)
	}
	return stored, nil
}

// NextFence implements [backend.Store]: a fence above the namespace's
// counter, key's grant and stored value, and the clock. With revoke it
// also ends key's current grant.
func (s *Shared) NextFence(ctx context.Context, key string, revoke bool) (int64, error) {
	h := hashName(key)
	spath := filepath.Join(s.lockDir(), h+".state")
	var fence int64
	err := s.withMutex(ctx, func() error {
		st, err := readState(spath)
		if err != nil {
			return err
		}
		fence, err = s.nextFenceLocked(key, st)
		if err != nil {
			return err
		}
		if revoke && st.token != "" {
			st.token, st.flocked, st.pid = "", false, 0
			st.fence = fence
			return s.writeInPlace(spath, st.encode())
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("file: next fence: %w", err)
	}
	return fence, nil
}

// nextFenceLocked hands out a fence, under the mutex: above the
// namespace's counter, key's grant st, key's stored value and the clock in
// microseconds; the counter is then set to it.
func (s *Shared) nextFenceLocked(key string, st state) (int64, error) {
	cpath := filepath.Join(s.root, "fence")
	counter, err := readCounter(cpath)
	if err != nil {
		return 0, err
	}
	vf, err := storedFence(filepath.Join(s.valueDir(), hashName(key)), key)
	if err != nil {
		return 0, err
	}
	fence := max(nowMicro(), counter+1, st.fence+1, vf+1)
	if fence > maxFence {
		return 0, errors.New("fences exhausted")
	}
	if err := s.writeInPlace(cpath, fmt.Appendf(nil, "%d\n", fence)); err != nil {
		return 0, err
	}
	return fence, nil
}
