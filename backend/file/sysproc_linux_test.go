package file

import "syscall"

// sysProcAttr asks the kernel to kill a child if the test binary dies
// without running its cleanups.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
