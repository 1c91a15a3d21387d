package hub

import "time"

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
					c.Send(pingFrame)
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
