package hub

import (
	"context"
	"errors"
	"time"

	"github.com/coder/websocket"
)

// heartbeatSlots spreads the pings of one interval over this many ticks,
// so 20,000 connections are not pinged in the same millisecond.
const heartbeatSlots = 16

// heartbeat is the one ticker behind every connection's liveness: each
// tick pings one slot's connections and closes those silent for longer
// than IdleTimeout, and closes any connection whose token expired
// (SetExpiry). No connection owns a timer or a goroutine for this.
func (h *Hub) heartbeat() {
	defer h.wg.Done()
	tick := time.NewTicker(h.cfg.PingInterval / heartbeatSlots)
	defer tick.Stop()
	var slot uint8
	var due, expired []*Conn
	for {
		select {
		case <-h.ctx.Done():
			return
		case now := <-tick.C:
			due, expired = h.slotConns(slot, due[:0], expired[:0], now.UnixNano())
			for _, c := range expired {
				c.expire(now.UnixNano())
			}
			clear(expired)
			idle := now.Add(-h.cfg.IdleTimeout).UnixNano()
			for _, c := range due {
				if c.lastRead.Load() < idle {
					c.Close(CloseIdle, "idle timeout")
				} else {
					c.ping()
				}
			}
			clear(due)
			slot = (slot + 1) % heartbeatSlots
		}
	}
}

// slotConns lists slot's connections and, on the same pass, every
// connection whose expiry passed.
func (h *Hub) slotConns(slot uint8, out, expired []*Conn, now int64) ([]*Conn, []*Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.conns {
		if c.slot == slot {
			out = append(out, c)
		}
		if at := c.expires.Load(); at != 0 && at <= now {
			expired = append(expired, c)
		}
	}
	return out, expired
}

// ping sends the heartbeat's ping. On an idle connection whose socket
// takes it at once it is written right here, on the ticker's goroutine:
// no queue entry, no job handed to a worker, no write deadline. Anything
// else (a writer at work, frames queued, a full socket) goes the way of
// every frame.
func (c *Conn) ping() {
	w := c.opts.Wire
	c.qmu.Lock()
	if w == nil || c.closing || c.writing || c.qhead < len(c.queue) {
		c.qmu.Unlock()
		c.Send(pingFrame)
		return
	}
	c.writing = true // this goroutine owns the socket's write side now
	c.qmu.Unlock()
	w.Begin()
	err := c.ws.Write(context.Background(), websocket.MessageText, pingFrame) // gathered in memory: cannot block
	pending, terr := w.TryEnd()
	if err = errors.Join(err, terr); err != nil {
		c.writeFailed(err, false)
		return
	}
	if pending { // the socket is full: a worker waits for it under the deadline
		c.h.spawn(func() {
			if err := w.End(time.Now().Add(c.h.cfg.WriteTimeout)); err != nil {
				c.writeFailed(err, false)
				return
			}
			c.flush()
		})
		return
	}
	c.qmu.Lock()
	if c.closing || c.qhead < len(c.queue) { // queued or closed meanwhile: enqueue saw a writer
		c.qmu.Unlock()
		c.h.spawn(c.flush)
		return
	}
	c.writing = false
	c.qmu.Unlock()
}
