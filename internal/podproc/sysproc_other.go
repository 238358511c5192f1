//go:build !linux

package podproc

import "syscall"

// sysProcAttr has nothing to add outside Linux; the parent's cleanup
// stops its pods, and a pod exits when its stdin closes.
func sysProcAttr() *syscall.SysProcAttr { return nil }
