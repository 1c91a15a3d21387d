package hub

import (
	"net"
	"sync"
	"time"
)

// SocketWire is the Wire over a hijacked net.Conn. Outside Begin/End it
// passes writes straight through (the library's own pongs and close
// frames); between them it gathers into a pooled buffer, so a batch of
// frames is one write system call and an idle connection holds no write
// buffer at all.
type SocketWire struct {
	conn net.Conn

	mu        sync.Mutex // held by End while writing, so order is kept
	gathering bool
	buf       *[]byte
}

// NewSocketWire wraps conn; give it to the WebSocket library as the
// writer under its (small) bufio.Writer, and to Attach as ConnOptions.Wire.
func NewSocketWire(conn net.Conn) *SocketWire { return &SocketWire{conn: conn} }

func (w *SocketWire) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.gathering {
		if w.buf == nil {
			w.buf = getBuf()
		}
		*w.buf = append(*w.buf, p...)
		w.mu.Unlock()
		return len(p), nil
	}
	w.mu.Unlock()
	return w.conn.Write(p)
}

// Begin starts gathering.
func (w *SocketWire) Begin() {
	w.mu.Lock()
	w.gathering = true
	w.mu.Unlock()
}

// End writes what was gathered under one deadline and releases the buffer.
func (w *SocketWire) End(deadline time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gathering = false
	if w.buf == nil {
		return nil
	}
	buf := w.buf
	w.buf = nil
	defer func() {
		*buf = (*buf)[:0]
		putBuf(buf)
	}()
	_ = w.conn.SetWriteDeadline(deadline)
	_, err := w.conn.Write(*buf)
	_ = w.conn.SetWriteDeadline(time.Time{})
	return err
}
