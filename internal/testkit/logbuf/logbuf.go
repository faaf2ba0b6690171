// Package logbuf is a bytes.Buffer safe for concurrent writers, for tests
// that collect a server's or a handler's log output while it runs.
package logbuf

import (
	"bytes"
	"sync"
)

// Buffer collects writes from any number of goroutines. Its zero value is
// ready to use.
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
