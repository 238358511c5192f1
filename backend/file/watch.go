package file

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// subscription is one Subscribe's channel.
type subscription struct{ ch chan struct{} }

// watcher is one Watch's callbacks.
type watcher struct {
	onWrite func(key, origin string)
	onReset func()
}

const (
	noteSuffix     = ".note"
	announcePrefix = "a-"
	lockSuffix     = ".lock"
)

// Notify implements [backend.Shared]: it writes key's note file, which
// wakes key's subscribers in every process.
func (s *Shared) Notify(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	path := filepath.Join(s.eventDir(), hashName(key)+noteSuffix)
	if err := s.writeInPlace(path, []byte(randHex(4))); err != nil {
		return fmt.Errorf("file: notify: %w", err)
	}
	return nil
}

// Subscribe implements [backend.Shared]. The channel has capacity 1;
// notifications that find it full are merged.
func (s *Shared) Subscribe(key string) (<-chan struct{}, func()) {
	sub := &subscription{ch: make(chan struct{}, 1)}
	h := hashName(key)
	s.subMu.Lock()
	m := s.subs[h]
	if m == nil {
		m = make(map[*subscription]struct{})
		s.subs[h] = m
	}
	m[sub] = struct{}{}
	s.startWatchLocked()
	s.subMu.Unlock()
	return sub.ch, func() {
		s.subMu.Lock()
		delete(s.subs[h], sub)
		if len(s.subs[h]) == 0 {
			delete(s.subs, h)
		}
		s.subMu.Unlock()
	}
}

// Announce implements [backend.Shared]: it writes one file per
// announcement in the namespace's event directory; files older than a
// minute are swept.
func (s *Shared) Announce(ctx context.Context, key, origin string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b := binary.AppendUvarint(nil, uint64(len(origin)))
	b = append(b, origin...)
	b = append(b, key...)
	name := fmt.Sprintf("%s%020d-%s", announcePrefix, time.Now().UnixNano(), randHex(6))
	if err := s.writeAtomic(filepath.Join(s.eventDir(), name), b); err != nil {
		return fmt.Errorf("file: announce: %w", err)
	}
	return nil
}

// Watch implements [backend.Shared]. The callbacks run on the view's
// watch goroutine, one at a time.
func (s *Shared) Watch(onWrite func(key, origin string), onReset func()) func() {
	w := &watcher{onWrite: onWrite, onReset: onReset}
	s.subMu.Lock()
	s.watchers[w] = struct{}{}
	s.startWatchLocked()
	s.subMu.Unlock()
	return func() {
		s.subMu.Lock()
		delete(s.watchers, w)
		s.subMu.Unlock()
	}
}

// startWatchLocked starts the watch goroutine, once; the watch is set up
// before it returns, so nothing renamed afterwards is missed. Called with
// subMu held.
func (s *Shared) startWatchLocked() {
	if s.watching {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	s.watching = true
	src := s.arm()
	s.wg.Add(1)
	go s.watchLoop(src)
}

// dispatch handles a file renamed into, or written in, the event
// directory, and a lock file closed by its holder (on Linux).
func (s *Shared) dispatch(name string) {
	switch {
	case strings.HasSuffix(name, noteSuffix):
		s.wake(strings.TrimSuffix(name, noteSuffix))
	case strings.HasSuffix(name, lockSuffix):
		if h := strings.TrimSuffix(name, lockSuffix); s.hasSubscribers(h) && s.holderDied(h) {
			s.wake(h)
		}
	case strings.HasPrefix(name, announcePrefix):
		b, err := os.ReadFile(filepath.Join(s.eventDir(), name))
		if err != nil {
			return // swept: a minute old
		}
		key, origin, err := decodeAnnouncement(b)
		if err != nil {
			return
		}
		for _, w := range s.watcherList() {
			w.onWrite(key, origin)
		}
	}
}

// hasSubscribers reports whether the key whose hash is h has subscribers.
func (s *Shared) hasSubscribers(h string) bool {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	return len(s.subs[h]) > 0
}

// holderDied reports whether the closing of the lock file of the key
// whose hash is h, by its holder, was a death rather than a release: its
// state still names a grant (a release clears it before the close, and
// its waiters are woken by the note that follows). The state is read
// without the mutex: a torn read is taken for a death, which costs the
// waiters a look.
func (s *Shared) holderDied(h string) bool {
	st, err := readState(filepath.Join(s.lockDir(), h+".state"))
	return err != nil || st.foreign || st.token != ""
}

// wake signals the subscribers of the key whose hash is h.
func (s *Shared) wake(h string) {
	s.subMu.Lock()
	for sub := range s.subs[h] {
		select {
		case sub.ch <- struct{}{}:
		default:
		}
	}
	s.subMu.Unlock()
}

func decodeAnnouncement(b []byte) (key, origin string, err error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return "", "", errors.New("file: bad announcement")
	}
	return string(b[k+int(n):]), string(b[k : k+int(n)]), nil
}

func (s *Shared) watcherList() []*watcher {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	out := make([]*watcher, 0, len(s.watchers))
	for w := range s.watchers {
		out = append(out, w)
	}
	return out
}

// reset wakes every subscriber and tells every watcher that
// announcements may have been lost.
func (s *Shared) reset() {
	s.subMu.Lock()
	for _, m := range s.subs {
		for sub := range m {
			select {
			case sub.ch <- struct{}{}:
			default:
			}
		}
	}
	s.subMu.Unlock()
	for _, w := range s.watcherList() {
		if w.onReset != nil {
			w.onReset()
		}
	}
}

// closed reports whether Close was called.
func (s *Shared) closed() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// pollState is what the poller saw at its last look.
type pollState struct {
	notes map[string]os.FileInfo
	seen  map[string]bool // announcements
}

// pollSnapshot takes the poller's first look, before Subscribe or Watch
// returns: what is there then is old, and whatever comes later is new.
func (s *Shared) pollSnapshot() *pollState {
	ps := &pollState{notes: make(map[string]os.FileInfo), seen: make(map[string]bool)}
	s.pollOnce(ps, false)
	return ps
}

// pollLoop watches the event directory by listing it every s.poll: where
// inotify is not available.
func (s *Shared) pollLoop(ps *pollState) {
	if ps == nil {
		ps = s.pollSnapshot()
	}
	t := time.NewTicker(s.poll)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.done:
			return
		}
		s.pollOnce(ps, true)
	}
}

// pollOnce lists the event directory and, with dispatch, delivers what
// changed since ps.
func (s *Shared) pollOnce(ps *pollState, dispatch bool) {
	ents, err := os.ReadDir(s.eventDir())
	if err != nil {
		s.subscribed.Store(false)
		_ = s.mkdirs()
		if dispatch {
			s.reset()
		}
		return
	}
	s.subscribed.Store(true)
	now := make(map[string]bool, len(ents))
	for _, e := range ents {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, noteSuffix):
			info, err := e.Info()
			if err != nil {
				continue
			}
			if old, ok := ps.notes[name]; ok && os.SameFile(old, info) && old.ModTime().Equal(info.ModTime()) {
				continue
			}
			ps.notes[name] = info
			if dispatch {
				s.dispatch(name)
			}
		case strings.HasPrefix(name, announcePrefix):
			now[name] = true
			if !ps.seen[name] {
				ps.seen[name] = true
				if dispatch {
					s.dispatch(name)
				}
			}
		}
	}
	for name := range ps.seen {
		if !now[name] {
			delete(ps.seen, name)
		}
	}
}
