package hub

import (
	"container/heap"
	"context"
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
//
// A connection is pinged only when it sent nothing for a whole
// PingInterval. Any frame proves liveness as well as a pong does, so a
// client that answers every ping is pinged every other interval (50 s by
// default, under the 55–60 s after which common L7 proxies drop a silent
// connection), and one that is busy anyway is not pinged at all. The
// idle close is unchanged: the first tick IdleTimeout after the last
// frame, with two pings sent in between. A ping round trip is most of an
// idle server's CPU (the write alone carries the loopback peer's receive
// path); this halves it.
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
			due, expired = h.slotConns(slot, due[:0]), h.expired(expired[:0], now.UnixNano())
			for _, c := range expired {
				c.expire(now.UnixNano())
			}
			clear(expired)
			idle := now.Add(-h.cfg.IdleTimeout).UnixNano()
			quiet := now.Add(-h.cfg.PingInterval).UnixNano()
			for _, c := range due {
				switch last := c.lastRead.Load(); {
				case last < idle:
					c.Close(CloseIdle, "idle timeout")
				case last <= quiet:
					c.ping()
				}
				// else: it sent a frame (say, the pong to the last ping)
				// within the interval, so it is alive
			}
			clear(due)
			slot = (slot + 1) % heartbeatSlots
		}
	}
}

// slotConns lists slot's connections: a copy of the slot's list, not a
// pass over every connection (that pass was a twentieth of the idle CPU).
func (h *Hub) slotConns(slot uint8, out []*Conn) []*Conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append(out, h.slots[slot]...)
}

// addToSlot and removeFromSlot keep the slot lists; callers hold h.mu.
func (h *Hub) addToSlot(c *Conn) {
	l := h.slots[c.slot]
	c.slotIdx = len(l)
	h.slots[c.slot] = append(l, c)
}

func (h *Hub) removeFromSlot(c *Conn) {
	l := h.slots[c.slot]
	if c.slotIdx >= len(l) || l[c.slotIdx] != c {
		return // never added (Attach refused it)
	}
	last := l[len(l)-1]
	l[c.slotIdx], last.slotIdx = last, c.slotIdx
	l[len(l)-1] = nil
	h.slots[c.slot] = l[:len(l)-1]
}

// expired pops every connection whose expiry passed: the heap's top is the
// soonest, so a tick looks at no connection that is not due.
func (h *Hub) expired(out []*Conn, now int64) []*Conn {
	h.expMu.Lock()
	defer h.expMu.Unlock()
	for len(h.expiring) > 0 && h.expiring[0].expAt <= now {
		out = append(out, heap.Pop(&h.expiring).(*Conn))
	}
	return out
}

// setExpiry records c's expiry (unix nanos; 0: none) and keeps it in the
// heap while it has one.
func (h *Hub) setExpiry(c *Conn, at int64) {
	h.expMu.Lock()
	defer h.expMu.Unlock()
	if c.expGone {
		return
	}
	c.expires.Store(at)
	c.expAt = at
	switch {
	case at == 0 && c.expIdx >= 0:
		heap.Remove(&h.expiring, c.expIdx)
	case at == 0:
	case c.expIdx >= 0:
		heap.Fix(&h.expiring, c.expIdx)
	default:
		heap.Push(&h.expiring, c)
	}
}

// forgetExpiry drops a detached connection from the heap for good.
func (h *Hub) forgetExpiry(c *Conn) {
	h.expMu.Lock()
	defer h.expMu.Unlock()
	c.expGone = true
	if c.expIdx >= 0 {
		heap.Remove(&h.expiring, c.expIdx)
	}
}

// expiryHeap orders connections by expAt (container/heap).
type expiryHeap []*Conn

func (e expiryHeap) Len() int           { return len(e) }
func (e expiryHeap) Less(i, j int) bool { return e[i].expAt < e[j].expAt }
func (e expiryHeap) Swap(i, j int) {
	e[i], e[j] = e[j], e[i]
	e[i].expIdx, e[j].expIdx = i, j
}
func (e *expiryHeap) Push(x any) {
	c := x.(*Conn)
	c.expIdx = len(*e)
	*e = append(*e, c)
}
func (e *expiryHeap) Pop() any {
	old := *e
	c := old[len(old)-1]
	old[len(old)-1] = nil
	*e = old[:len(old)-1]
	c.expIdx = -1
	return c
}

// ping sends the heartbeat's ping. On an idle connection whose socket
// takes it at once it is written right here, on the ticker's goroutine:
// no queue entry, no job handed to a worker, no write deadline. Anything
// else (a writer at work, frames queued, a control frame being written, a
// full socket) goes to a worker, so the ticker never waits on one peer.
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
	if !w.TryBegin() { // a control frame is being written: a worker waits for it
		c.enqueue(&outFrame{data: pingFrame})
		c.h.spawn(c.flush)
		return
	}
	c.endNow(c.ws.Write(context.Background(), websocket.MessageText, pingFrame)) // gathered in memory: cannot block
}
