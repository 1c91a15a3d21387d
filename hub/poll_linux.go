//go:build linux

package hub

import (
	"errors"
	"os"
	"sync"
	"syscall"
)

// poller lets idle connections wait for their next frame without a
// goroutine. Each connection's socket is registered edge-triggered in an
// epoll instance of the hub's own; the epoll descriptor itself is waited
// on through Go's netpoller (an epoll descriptor is pollable), so the
// poller goroutine parks like any network reader and no thread blocks.
// When bytes arrive a short job reads and handles frames until the
// library's reader holds no more bytes and exits; an event that came
// while it read makes it look at the socket once more first (conn.go's
// rest). The registration is never re-armed: a one-shot one cost an
// epoll_ctl per frame, a third of an idle connection's system calls.
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
	return p != nil && c.opts.Socket != nil && c.opts.Reader != nil && c.opts.Drain != nil
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

// epollET is EPOLLET as the uint32 EpollEvent holds (syscall's constant is a negative int).
const epollET = 1 << 31

// add registers c's socket, edge-triggered: an event for every arrival
// of bytes (and for bytes already there when it is added), so the
// registration stays armed and reading costs no epoll_ctl. An error means
// the socket or the poller is closed.
func (p *poller) add(c *Conn) error {
	id := c.reg.id
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | epollET,
		Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
	var cerr error
	// Control holds both descriptors open for the call: neither number can
	// be closed and reused under it.
	err := c.reg.rc.Control(func(fd uintptr) {
		if err := p.rc.Control(func(ep uintptr) {
			cerr = syscall.EpollCtl(int(ep), syscall.EPOLL_CTL_ADD, int(fd), &ev)
		}); err != nil {
			cerr = err
		}
	})
	return errors.Join(err, cerr)
}

// hasBytes reports whether c's socket holds bytes, an end of stream or an
// error for a reader, without waiting: an edge-triggered event that came
// while a reader ran may stand for bytes it already read.
func (p *poller) hasBytes(c *Conn) bool {
	var b [1]byte
	more := true // a socket that cannot be asked is for the reader to find out
	_ = c.reg.rc.Control(func(fd uintptr) {
		for {
			_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if err == syscall.EINTR {
				continue
			}
			more = err != syscall.EAGAIN
			return
		}
	})
	return more
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
