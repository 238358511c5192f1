package podproc

import "syscall"

// sysProcAttr asks the kernel to kill a pod if its parent dies without
// running its cleanups, so that no pod outlives a crashed test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
