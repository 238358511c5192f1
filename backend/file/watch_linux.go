//go:build linux

package file

import (
	"bytes"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// forcePoll makes views poll instead of using inotify (tests).
var forcePoll = false

const (
	watchMask = syscall.IN_MOVED_TO | syscall.IN_CLOSE_WRITE | syscall.IN_DELETE_SELF | syscall.IN_MOVE_SELF | syscall.IN_ONLYDIR
	lockMask  = syscall.IN_CLOSE_WRITE | syscall.IN_DELETE_SELF | syscall.IN_MOVE_SELF | syscall.IN_ONLYDIR
)

// inotifyWatch is an inotify instance watching the event and lock
// directories.
type inotifyWatch struct{ f *os.File }

// arm sets up the inotify watch of the event directory (or, polling, takes
// the first look); nil when inotify is not available (the loop then polls)
// or the watch could not be set up yet (the loop retries).
func (s *Shared) arm() any {
	if forcePoll {
		return s.pollSnapshot()
	}
	w, err := s.newInotify()
	if err != nil {
		return nil
	}
	return w
}

func (s *Shared) newInotify() (*inotifyWatch, error) {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		return nil, err
	}
	_ = s.mkdirs()
	if _, err := syscall.InotifyAddWatch(fd, s.eventDir(), watchMask); err != nil {
		_ = syscall.Close(fd)
		return nil, err
	}
	// The lock directory's closes: a lock file is opened for writing only
	// by its holder, so its IN_CLOSE_WRITE is a holder gone (released, or
	// dead: the kernel closes a dead process's files and drops their
	// flocks). The state files' writes come too, and are ignored.
	if _, err := syscall.InotifyAddWatch(fd, s.lockDir(), lockMask); err != nil {
		_ = syscall.Close(fd)
		return nil, err
	}
	// A non-blocking descriptor goes to the runtime's poller: Read parks
	// the goroutine, and Close wakes it.
	w := &inotifyWatch{f: os.NewFile(uintptr(fd), "inotify")}
	s.inoMu.Lock()
	s.inotify = w.f
	s.inoMu.Unlock()
	s.subscribed.Store(true)
	return w, nil
}

// stopWatch wakes the watch goroutine, which then sees that the view is
// closed.
func (s *Shared) stopWatch() {
	s.inoMu.Lock()
	f := s.inotify
	s.inotify = nil
	s.inoMu.Unlock()
	if f != nil {
		_ = f.Close()
	}
}

// watchLoop reads inotify events, setting the watch up again (and
// resetting the subscribers and watchers) when it is lost. Where inotify
// cannot be had at all it polls.
func (s *Shared) watchLoop(src any) {
	defer s.wg.Done()
	if ps, ok := src.(*pollState); ok {
		s.pollLoop(ps)
		return
	}
	w, _ := src.(*inotifyWatch)
	if w == nil {
		// Is inotify there at all (not out of instances, say)?
		fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC)
		if err != nil {
			s.pollLoop(nil)
			return
		}
		_ = syscall.Close(fd)
	}
	buf := make([]byte, 64*1024)
	for {
		if w == nil {
			var err error
			if w, err = s.newInotify(); err != nil {
				select {
				case <-time.After(s.poll):
					continue
				case <-s.done:
					return
				}
			}
			s.reset()
		}
		if s.closed() {
			_ = w.f.Close()
			return
		}
		lost := s.readEvents(w, buf)
		s.subscribed.Store(false)
		_ = w.f.Close()
		if s.closed() {
			return
		}
		w = nil
		if !lost {
			// Read failed for another reason: do not spin.
			select {
			case <-time.After(s.poll):
			case <-s.done:
				return
			}
		}
	}
}

// readEvents dispatches w's events until the watch is lost (true) or a
// read fails (false, as when the view closes).
func (s *Shared) readEvents(w *inotifyWatch, buf []byte) bool {
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return false
		}
		for off := 0; off+syscall.SizeofInotifyEvent <= n; {
			ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameAt := off + syscall.SizeofInotifyEvent
			end := nameAt + int(ev.Len)
			if end > n {
				break
			}
			name := string(bytes.TrimRight(buf[nameAt:end], "\x00"))
			off = end
			switch {
			case ev.Mask&syscall.IN_Q_OVERFLOW != 0:
				s.reset()
			case ev.Mask&(syscall.IN_IGNORED|syscall.IN_DELETE_SELF|syscall.IN_MOVE_SELF) != 0:
				return true
			case name != "":
				s.dispatch(name)
			}
		}
	}
}
