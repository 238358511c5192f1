//go:build unix

package podproc

import "syscall"

// Stop freezes the pod with SIGSTOP. The signal is sent, not awaited:
// the pod stops when the kernel next schedules it.
func (p *Proc) Stop() error { return p.Signal(syscall.SIGSTOP) }

// Cont undoes [Proc.Stop] with SIGCONT.
func (p *Proc) Cont() error { return p.Signal(syscall.SIGCONT) }

// resume continues a pod that may be stopped, so that its stdin's end
// reaches it.
func (p *Proc) resume() { _ = p.Cont() }
