//go:build !unix

package podproc

// resume has nothing to do where pods cannot be stopped.
func (p *Proc) resume() {}
