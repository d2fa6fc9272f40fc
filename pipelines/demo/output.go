package demo

import (
	"io"
	"sync"
)

// syncWriter serializes writes to w: the status line and the restarts'
// notes are written from different goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
