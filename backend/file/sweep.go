package file

import (
	"context"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// tempAge is the age past which a temporary file is a crashed writer's
// leftover.
const tempAge = time.Minute

// noteAge is the age past which a key's note file is removed: its waiters
// are long gone.
const noteAge = time.Hour

// sweepLoop sweeps the namespace every period until the view closes.
func (s *Shared) sweepLoop(every time.Duration) {
	defer s.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.sweep(every)
		case <-s.done:
			return
		}
	}
}

// sweep removes expired values, old announcements and notes, the files of
// locks that have been free for a period, and leftover temporary files.
// Values and lock files are removed under the mutex, after a second look.
func (s *Shared) sweep(period time.Duration) {
	now := time.Now()
	s.sweepDir(s.root, now, nil)
	s.sweepDir(s.eventDir(), now, func(name string, info os.FileInfo) {
		age := now.Sub(info.ModTime())
		if (strings.HasPrefix(name, announcePrefix) && age > announceRetention) ||
			(strings.HasSuffix(name, noteSuffix) && age > noteAge) {
			_ = os.Remove(filepath.Join(s.eventDir(), name))
		}
	})
	s.sweepDir(s.valueDir(), now, func(name string, _ os.FileInfo) {
		path := filepath.Join(s.valueDir(), name)
		if !expiredFile(path, now) {
			return
		}
		s.locked(func() error {
			if expiredFile(path, time.Now()) {
				_ = os.Remove(path)
			}
			return nil
		})
	})
	s.sweepDir(s.lockDir(), now, func(name string, info os.FileInfo) {
		h, ok := strings.CutSuffix(name, ".state")
		if !ok || now.Sub(info.ModTime()) < period {
			return
		}
		spath := filepath.Join(s.lockDir(), name)
		lpath := filepath.Join(s.lockDir(), h+lockSuffix)
		s.locked(func() error {
			st, err := readState(spath)
			if err != nil || st.granted(nowMicro()) {
				return nil
			}
			f, err := os.Open(lpath) // read-only: its close wakes nobody
			if err == nil {
				defer f.Close()
				if ok, err := tryFlock(f); err != nil || !ok {
					return nil // an old holder still has it
				}
				_ = os.Remove(lpath)
			}
			_ = os.Remove(spath)
			return nil
		})
	})
}

// sweepDir calls f for every file of dir but temporary ones, and removes
// temporary files older than tempAge.
func (s *Shared) sweepDir(dir string, now time.Time, f func(name string, info os.FileInfo)) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if s.closed() {
			return
		}
		if e.IsDir() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		if strings.HasPrefix(e.Name(), ".tmp-") {
			if now.Sub(info.ModTime()) > tempAge {
				_ = os.Remove(filepath.Join(dir, e.Name()))
			}
			continue
		}
		if f != nil {
			f(e.Name(), info)
		}
	}
}

// locked runs f under the mutex, giving up after a second.
func (s *Shared) locked(f func() error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = s.withMutex(ctx, f)
}

// expiredFile reports whether the value file at path is past its until,
// or is not a value file.
func expiredFile(path string, now time.Time) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var h [valueHeader]byte
	if _, err := io.ReadFull(f, h[:]); err != nil || string(h[:len(valueMagic)]) != valueMagic {
		return true
	}
	until := int64(binary.BigEndian.Uint64(h[len(valueMagic)+8:]))
	return until != 0 && until <= now.UnixNano()
}
