package hub

import (
	"net"
	"sync/atomic"
)

// SocketReader is the net.Conn a polled connection's WebSocket library
// reads through (its bufio.Reader is reset onto the hijacked conn, so the
// wrapper must be that conn). It remembers whether the socket's last read
// drained it: a TCP read that returns less than asked found the receive
// queue empty, so every byte that came after it raised an edge-triggered
// event of its own. A read that filled the buffer may have left bytes no
// event will announce again (poll_linux.go).
type SocketReader struct {
	net.Conn
	drained atomic.Bool
}

// NewSocketReader wraps conn; return it from Hijack, and give it to
// Attach as ConnOptions.Drain.
func NewSocketReader(conn net.Conn) *SocketReader { return &SocketReader{Conn: conn} }

func (r *SocketReader) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	r.drained.Store(n < len(p) || err != nil)
	return n, err
}

// Drained reports whether the last read took everything the socket held.
func (r *SocketReader) Drained() bool { return r.drained.Load() }
