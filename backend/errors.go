package backend

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrNotAcquired means another holder owns the lock.
	ErrNotAcquired = errors.New("lock: not acquired")
	// ErrNotHeld means the lease was lost: it expired, or another holder
	// took the lock after it did. Returned by Release and Extend.
	ErrNotHeld = errors.New("lock: not held")
	// ErrBackend is matched by every [*BackendError].
	ErrBackend = errors.New("lock: backend failed")
)

// BackendError reports that the lock backend failed, so the outcome of the
// operation is unknown or it did not happen. It does not name the key:
// keys may be secrets (no error of this package names one).
type BackendError struct {
	// Op is the operation that failed: "acquire", "release", "extend",
	// "inspect" or "notify".
	Op string
	// Err is the backend's error.
	Err error
}

// Error names the operation and the backend's error, never the key.
func (e *BackendError) Error() string {
	return fmt.Sprintf("lock: %s: backend failed: %v", e.Op, e.Err)
}

// Unwrap returns the backend's error.
func (e *BackendError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrBackend].
func (e *BackendError) Is(target error) bool { return target == ErrBackend }

// ErrLockLost is returned by a [Store]'s Save, and by package cache's
// Redis.Commit, when the writer's lock no longer holds its token: its
// lease was taken over, expired, or lost with the store's keys. Nothing
// was written.
var ErrLockLost = errors.New("cache: lock lost; value not written")

// DefaultHeartbeat is how often a holder's watchdog beats when its locker
// is given no period (lock.RedisOptions.Heartbeat 0); the pipeline's own
// default, resilience.DefaultLockHeartbeat, is the same.
const DefaultHeartbeat = time.Second
