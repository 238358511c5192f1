package file

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herdguard/herdguard/backend"
)

// Defaults of [Options].
const (
	// DefaultPoll is how often a watcher polls where inotify is not
	// available, and how often it retries setting up a lost watch.
	DefaultPoll = 50 * time.Millisecond
	// DefaultSweep is how often expired values and stale files are
	// removed.
	DefaultSweep = time.Minute
	// DefaultHeartbeat is the holders' beat when the pipeline's scope
	// gives none.
	DefaultHeartbeat = time.Second
	// announceRetention is how long an announcement's file stays for
	// watchers that have not read it yet.
	announceRetention = time.Minute
)

const (
	dirMode  = 0o700
	fileMode = 0o600
)

// Options configures a [Backend]. Zero fields take defaults.
type Options struct {
	// Poll is how often a watcher looks at the directory where inotify is
	// not available (systems other than Linux), and how often it retries
	// a watch it lost.
	// default: 50 milliseconds ([DefaultPoll])
	Poll time.Duration
	// Sweep is how often each opened namespace removes its expired
	// values, announcements older than a minute, the files of free locks
	// and leftover temporary files; negative turns sweeping off.
	// default: a minute ([DefaultSweep])
	Sweep time.Duration
}

// Backend shares values, locks and announcements between the processes of
// one host through a directory; see the package's documentation. It is
// safe for concurrent use.
type Backend struct {
	dir   string
	poll  time.Duration
	sweep time.Duration
}

var _ backend.Backend = (*Backend)(nil)

// New returns a backend that keeps its files under dir, creating it (mode
// 0700) if needed. It refuses an empty dir. Every process that shares dir
// must run as the same user: files are created with mode 0600.
func New(dir string, o Options) (*Backend, error) {
	if !supported {
		return nil, errors.ErrUnsupported
	}
	if dir == "" {
		return nil, errors.New("file: directory is empty")
	}
	if o.Poll < 0 {
		return nil, errors.New("file: Poll must not be negative")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("file: %w", err)
	}
	if err := os.MkdirAll(abs, dirMode); err != nil {
		return nil, fmt.Errorf("file: %w", err)
	}
	b := &Backend{dir: abs, poll: o.Poll, sweep: o.Sweep}
	if b.poll == 0 {
		b.poll = DefaultPoll
	}
	if b.sweep == 0 {
		b.sweep = DefaultSweep
	}
	return b, nil
}

// System returns "file", the backend's name in telemetry.
func (b *Backend) System() string { return "file" }

// System returns "file": the view's name in the pipeline's spans.
func (s *Shared) System() string { return "file" }

// Subscribed reports whether the view's watch (inotify, or the poller) is
// established now: false before the first Subscribe or Watch, while a
// lost watch is being set up again, and after Close.
func (s *Shared) Subscribed() bool { return s.subscribed.Load() && !s.closed() }

// Dir returns the backend's directory, made absolute.
func (b *Backend) Dir() string { return b.dir }

// Open implements [backend.Backend]: it creates s.Namespace's
// subdirectory and returns its view.
func (b *Backend) Open(s backend.Scope) (backend.Shared, error) {
	return b.open(s)
}

func (b *Backend) open(s backend.Scope) (*Shared, error) {
	if s.Namespace == "" {
		return nil, errors.New("file: namespace is empty")
	}
	if s.Heartbeat < 0 {
		return nil, errors.New("file: heartbeat must not be negative")
	}
	sh := &Shared{
		root:      filepath.Join(b.dir, "ns-"+hashName(s.Namespace)),
		heartbeat: s.Heartbeat,
		poll:      b.poll,
		sem:       make(chan struct{}, 1),
		held:      make(map[string]*os.File),
		subs:      make(map[string]map[*subscription]struct{}),
		watchers:  make(map[*watcher]struct{}),
		done:      make(chan struct{}),
	}
	if sh.heartbeat == 0 {
		sh.heartbeat = DefaultHeartbeat
	}
	if err := sh.mkdirs(); err != nil {
		return nil, fmt.Errorf("file: %w", err)
	}
	if b.sweep > 0 {
		sh.wg.Add(1)
		go sh.sweepLoop(b.sweep)
	}
	return sh, nil
}

// Shared is one namespace's view of a [Backend]; it implements
// [backend.Shared]. It is safe for concurrent use.
type Shared struct {
	root      string
	heartbeat time.Duration
	poll      time.Duration

	// sem serializes this view's holds of the namespace mutex (an flock
	// on one open file description is shared by its goroutines).
	sem    chan struct{}
	mfd    *os.File // the mutex file, guarded by sem
	heldMu sync.Mutex
	held   map[string]*os.File // lock files of this view's grants, by token

	subMu    sync.Mutex
	subs     map[string]map[*subscription]struct{} // by key hash
	watchers map[*watcher]struct{}
	watching bool // the watch goroutine runs

	subscribed atomic.Bool // the watch is established now

	inoMu   sync.Mutex
	inotify *os.File // the watch's inotify instance, closed by Close

	closeOnce sync.Once
	done      chan struct{}
	wg        sync.WaitGroup
}

var (
	_ backend.Shared = (*Shared)(nil)
	_ backend.Holder = (*Shared)(nil)
)

func (s *Shared) valueDir() string { return filepath.Join(s.root, "v") }
func (s *Shared) lockDir() string  { return filepath.Join(s.root, "l") }
func (s *Shared) eventDir() string { return filepath.Join(s.root, "e") }

func (s *Shared) mkdirs() error {
	for _, d := range []string{s.valueDir(), s.lockDir(), s.eventDir()} {
		if err := os.MkdirAll(d, dirMode); err != nil {
			return err
		}
	}
	return nil
}

// hashName is the file name of a key or namespace: 128 bits of its
// SHA-256, in hex.
func hashName(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:16])
}

// withMutex runs f while this process holds the namespace's mutex: an
// exclusive flock on its mutex file, taken without blocking in the kernel
// and retried until ctx ends. A mutex file that was removed (the directory
// was deleted) is opened again at its path.
func (s *Shared) withMutex(ctx context.Context, f func() error) error {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.done:
		return errClosed
	}
	defer func() { <-s.sem }()
	wait := 20 * time.Microsecond
	for {
		if s.mfd == nil {
			fd, err := s.openCreate(filepath.Join(s.root, "mutex"), os.O_RDWR)
			if err != nil {
				return err
			}
			s.mfd = fd
		}
		ok, err := tryFlock(s.mfd)
		if err != nil {
			return err
		}
		if ok {
			if sameFile(s.mfd) {
				break
			}
			// Locked a removed file: nobody else would see it.
			_ = s.mfd.Close()
			s.mfd = nil
			continue
		}
		if err := sleepCtx(ctx, wait); err != nil {
			return err
		}
		wait = min(wait*2, time.Millisecond)
	}
	defer func() { _ = unflock(s.mfd) }()
	return f()
}

var errClosed = errors.New("file: closed")

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// openCreate opens (creating) path, creating the namespace's directories
// again if they were removed.
func (s *Shared) openCreate(path string, flag int) (*os.File, error) {
	f, err := os.OpenFile(path, flag|os.O_CREATE, fileMode)
	if errors.Is(err, fs.ErrNotExist) {
		if err := s.mkdirs(); err != nil {
			return nil, err
		}
		f, err = os.OpenFile(path, flag|os.O_CREATE, fileMode)
	}
	return f, err
}

// writeAtomic replaces path with data: a temporary file in the same
// directory, renamed over it.
func (s *Shared) writeAtomic(path string, data []byte) error {
	dir, base := filepath.Split(path)
	tmp := filepath.Join(dir, ".tmp-"+base+"-"+randHex(6))
	f, err := s.openCreate(tmp, os.O_WRONLY|os.O_EXCL)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// writeInPlace overwrites path with data. For files read only under the
// mutex (lock states, the fence counter), and for notes: cheaper than
// creating a file. A crash in the middle leaves a torn file, which
// readers take as foreign (a state) or as 0 (the counter; the clock keeps
// fences growing).
func (s *Shared) writeInPlace(path string, data []byte) error {
	f, err := s.openCreate(path, os.O_WRONLY)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(data, 0)
	if err == nil {
		err = f.Truncate(int64(len(data)))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b)
}

// Ping checks that the namespace's directory can be written: it takes the
// mutex, which creates the directories again if they were removed.
func (s *Shared) Ping(ctx context.Context) error {
	if err := s.withMutex(ctx, func() error { return nil }); err != nil {
		return fmt.Errorf("file: ping: %w", err)
	}
	return nil
}

// Close stops the view's watcher and sweeper and drops the flocks of the
// grants it still holds (their state stays, and the next TryAcquire takes
// each over, as a crashed holder's). It does not remove the directory.
func (s *Shared) Close() error {
	s.closeOnce.Do(func() {
		close(s.done)
		s.stopWatch()
		s.wg.Wait()
		s.sem <- struct{}{}
		if s.mfd != nil {
			_ = s.mfd.Close()
			s.mfd = nil
		}
		<-s.sem
		s.heldMu.Lock()
		for tok, f := range s.held {
			_ = f.Close()
			delete(s.held, tok)
		}
		s.heldMu.Unlock()
	})
	return nil
}
