//go:build !linux

package file

// arm has nothing to set up where the directory is polled.
func (s *Shared) arm() any { return nil }

// watchLoop polls the event directory.
func (s *Shared) watchLoop(any) {
	defer s.wg.Done()
	s.pollLoop()
}

func (s *Shared) stopWatch() {}

// forcePoll is always in effect here.
var forcePoll = true
