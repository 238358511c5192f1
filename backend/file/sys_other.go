//go:build !unix

package file

import (
	"errors"
	"os"
)

const supported = false

var errNoFlock = errors.New("file: flock is not available on this system")

func tryFlock(*os.File) (bool, error) { return false, errNoFlock }

func unflock(*os.File) error { return errNoFlock }

func sameFile(*os.File) bool { return false }
