//go:build !linux

package file

// arm takes the poller's first look.
func (s *Shared) arm() any { return s.pollSnapshot() }

// watchLoop polls the event directory.
func (s *Shared) watchLoop(src any) {
	defer s.wg.Done()
	ps, _ := src.(*pollState)
	s.pollLoop(ps)
}

func (s *Shared) stopWatch() {}

// forcePoll is always in effect here.
var forcePoll = true
