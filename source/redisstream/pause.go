package redisstream

// PauseReading stops reading new entries, taking over idle ones and
// re-reading its own, until ResumeReading, so that another level's
// entries are read sooner and this stream's backlog stays in Redis for
// other instances of the group: a priority source (source.Priority) calls
// it on a lower level while a higher one has work waiting. A read already
// waiting (up to Block) may still deliver; settles, acknowledgements and
// the renewal of the entries held go on. Calling it while paused does
// nothing. It is safe from any goroutine.
func (s *Source) PauseReading() {
	s.paused.Store(true)
}

// ResumeReading undoes PauseReading.
func (s *Source) ResumeReading() {
	if s.paused.CompareAndSwap(true, false) {
		s.wakeReader()
	}
}
