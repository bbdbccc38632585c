package testbin

import (
	"bytes"
	"sync"
)

// Buffer collects what a process or a logger writes while the test reads
// it: exec copies a process's output from a goroutine of its own, and a
// logger writes from whichever goroutine logs.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
