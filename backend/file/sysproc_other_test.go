//go:build unix && !linux

package file

import "syscall"

// sysProcAttr: children are killed by the tests' cleanups.
func sysProcAttr() *syscall.SysProcAttr { return nil }
