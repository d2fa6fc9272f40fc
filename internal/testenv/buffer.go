package testenv

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that goroutines may write to at once (a logger
// shared by a pipeline's stages) while a test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
