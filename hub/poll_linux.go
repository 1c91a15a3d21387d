//go:build linux

package hub

import (
	"errors"
	"os"
	"sync"
	"syscall"
)

// poller lets idle connections wait for their next frame without a
// goroutine. Each connection's socket is registered one-shot in an epoll
// instance of the hub's own; the epoll descriptor itself is waited on
// through Go's netpoller (an epoll descriptor is pollable), so the poller
// goroutine parks like any network reader and no thread blocks. When a
// socket becomes readable its registration is spent, and a short-lived
// goroutine reads and handles frames until the library's reader holds no
// more bytes, re-arms the registration (level-triggered: bytes that came
// in meanwhile fire at once) and exits.
//
// A goroutine parked in coder/websocket's blocking Read keeps an 8 KiB
// stack for the connection's whole life; this keeps nothing but the
// registration.
type poller struct {
	f  *os.File // the epoll instance
	rc syscall.RawConn

	mu    sync.Mutex
	next  uint64
	conns map[uint64]*Conn // registration id → connection
}

func newPoller() (*poller, error) {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "hub-epoll") // non-blocking: registered with the netpoller
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return &poller{f: f, rc: rc, conns: map[uint64]*Conn{}}, nil
}

// pollReg is a connection's registration.
type pollReg struct {
	id uint64
	rc syscall.RawConn // the socket
}

// canPoll reports whether c's socket can be registered.
func (p *poller) canPoll(c *Conn) bool {
	return p != nil && c.opts.Socket != nil && c.opts.Reader != nil
}

// register gives c a registration id; arm adds the socket.
func (p *poller) register(c *Conn) error {
	rc, err := c.opts.Socket.SyscallConn()
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.next++
	c.reg = pollReg{id: p.next, rc: rc}
	p.conns[c.reg.id] = c
	p.mu.Unlock()
	return nil
}

// arm registers c's socket for one readiness event (first: add it; later:
// re-arm it). An error means the socket or the poller is closed.
func (p *poller) arm(c *Conn, first bool) error {
	op := syscall.EPOLL_CTL_MOD
	if first {
		op = syscall.EPOLL_CTL_ADD
	}
	id := c.reg.id
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT,
		Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
	var cerr error
	// Control holds both descriptors open for the call: neither number can
	// be closed and reused under it.
	err := c.reg.rc.Control(func(fd uintptr) {
		if err := p.rc.Control(func(ep uintptr) {
			cerr = syscall.EpollCtl(int(ep), op, int(fd), &ev)
		}); err != nil {
			cerr = err
		}
	})
	return errors.Join(err, cerr)
}

// forget drops c's registration id (the kernel drops the registration
// itself when the socket closes). A late event for it is ignored.
func (p *poller) forget(c *Conn) {
	if c.reg.id == 0 {
		return
	}
	p.mu.Lock()
	delete(p.conns, c.reg.id)
	p.mu.Unlock()
}

// run dispatches readiness events until close.
func (p *poller) run() {
	events := make([]syscall.EpollEvent, 256)
	for {
		var n int
		var werr error
		err := p.rc.Read(func(fd uintptr) bool {
			n, werr = syscall.EpollWait(int(fd), events, 0)
			if werr == syscall.EINTR {
				n, werr = 0, nil
				return true // try again at once: pending events raise no new edge
			}
			return werr != nil || n > 0
		})
		if err != nil || werr != nil {
			return // closed
		}
		for i := range events[:n] {
			id := uint64(uint32(events[i].Fd)) | uint64(uint32(events[i].Pad))<<32
			p.mu.Lock()
			c := p.conns[id]
			p.mu.Unlock()
			if c != nil {
				c.readable()
			}
		}
	}
}

func (p *poller) close() { _ = p.f.Close() }
