package hub

import (
	"errors"
	"net"
	"sync"
	"syscall"
	"time"
)

// SocketWire is the Wire over a hijacked net.Conn. Outside Begin/End it
// passes writes straight through (the library's own pongs and close
// frames); between them it gathers into a pooled buffer, so a batch of
// frames is one write system call and an idle connection holds no write
// buffer at all.
//
// Over a plain socket End first writes without a deadline: a socket whose
// send buffer has room takes a small frame at once, and arming and
// clearing the write deadline (a runtime timer each) was a tenth of an
// idle server's heartbeat CPU. Only bytes the socket did not take are
// written under the deadline.
type SocketWire struct {
	conn net.Conn
	raw  syscall.RawConn // nil: no deadline-free first attempt (not a plain socket)

	mu        sync.Mutex // held by every write, so frames never interleave
	gathering bool
	buf       *[]byte // gathered, or left over by TryEnd: written before anything else
}

// NewSocketWire wraps conn; give it to the WebSocket library as the
// writer under its (small) bufio.Writer, and to Attach as ConnOptions.Wire.
func NewSocketWire(conn net.Conn) *SocketWire {
	w := &SocketWire{conn: conn}
	if sc, ok := conn.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			w.raw = rc
		}
	}
	return w
}

func (w *SocketWire) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gathering || w.buf != nil { // behind what is gathered or left over
		if w.buf == nil {
			w.buf = getBuf()
		}
		*w.buf = append(*w.buf, p...)
		return len(p), nil
	}
	return w.conn.Write(p)
}

// Begin starts gathering.
func (w *SocketWire) Begin() {
	w.mu.Lock()
	w.gathering = true
	w.mu.Unlock()
}

// TryBegin starts gathering unless a write holds the wire: the library's
// own control frame (a pong, a close) to a peer that does not read blocks
// here for up to its timeout, and the heartbeat must not wait on it.
func (w *SocketWire) TryBegin() bool {
	if !w.mu.TryLock() {
		return false
	}
	w.gathering = true
	w.mu.Unlock()
	return true
}

// End writes what was gathered (and what TryEnd left over), what the
// socket does not take at once under the deadline, and releases the
// buffer.
func (w *SocketWire) End(deadline time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gathering = false
	if w.buf == nil {
		return nil
	}
	defer w.release()
	n, err := w.tryWrite(*w.buf)
	if err != nil || n == len(*w.buf) {
		return err
	}
	_ = w.conn.SetWriteDeadline(deadline)
	_, err = w.conn.Write((*w.buf)[n:])
	_ = w.conn.SetWriteDeadline(time.Time{})
	return err
}

// TryEnd writes what was gathered as far as the socket takes it now,
// without waiting. pending reports bytes left over: the caller must call
// End (from a goroutine that may wait) before anything else is written;
// until then later writes queue behind them.
func (w *SocketWire) TryEnd() (pending bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gathering = false
	if w.buf == nil {
		return false, nil
	}
	n, err := w.tryWrite(*w.buf)
	if err != nil || n == len(*w.buf) {
		w.release()
		return false, err
	}
	*w.buf = append((*w.buf)[:0], (*w.buf)[n:]...)
	return true, nil
}

func (w *SocketWire) release() {
	*w.buf = (*w.buf)[:0]
	putBuf(w.buf)
	w.buf = nil
}

// tryWrite writes b on the non-blocking socket until it would block and
// returns how much it took. Callers hold mu: no other write is under way.
func (w *SocketWire) tryWrite(b []byte) (int, error) {
	if w.raw == nil {
		return 0, nil
	}
	n := 0
	var werr error
	err := w.raw.Control(func(fd uintptr) {
		for n < len(b) {
			m, err := syscall.Write(int(fd), b[n:])
			switch {
			case err == syscall.EINTR:
				continue
			case err == syscall.EAGAIN:
				return
			case err != nil:
				werr = err
				return
			case m <= 0:
				return
			}
			n += m
		}
	})
	return n, errors.Join(err, werr)
}
