//go:build !linux

package crosspod_test

import "syscall"

// sysProcAttr has nothing to add outside Linux; the fleet's cleanup stops
// the pods, and a pod exits when its stdin closes.
func sysProcAttr() *syscall.SysProcAttr { return nil }
