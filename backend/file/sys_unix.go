//go:build unix

package file

import (
	"errors"
	"os"
	"syscall"
)

const supported = true

// tryFlock takes an exclusive flock on f without waiting; it reports false
// when another open file description holds one.
func tryFlock(f *os.File) (bool, error) {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK):
			return false, nil
		default:
			return false, &os.PathError{Op: "flock", Path: f.Name(), Err: err}
		}
	}
}

// unflock drops f's flock.
func unflock(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}

// sameFile reports whether f is still the file at its path: a file that
// was removed (or replaced) after f was opened is not, and its flock
// excludes nobody who opens the path now.
func sameFile(f *os.File) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(f.Name())
	if err != nil {
		return false
	}
	return os.SameFile(a, b)
}
