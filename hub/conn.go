package hub

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/ensemble-dev/ensemble/host"
)

// Close codes. 4000–4499: the client should reconnect (with backoff);
// 4500–4999: it should not reconnect without a change (new token, fix).
const (
	CloseShutdown        websocket.StatusCode = 4001 // server shutting down
	CloseIdle            websocket.StatusCode = 4002 // nothing received for too long
	CloseSlowConsumer    websocket.StatusCode = 4008 // fell too far behind
	CloseTokenExpired    websocket.StatusCode = 4010 // reconnect with a fresh token
	CloseProtocol        websocket.StatusCode = 4500 // protocol violation
	CloseUnauthenticated websocket.StatusCode = 4501 // missing or invalid token
)

var pingFrame = []byte(`{"type":"ping"}`)

// Conn is one WebSocket watcher: a reader (Run's goroutine), a writer
// goroutine fed by a bounded, byte-capped queue, and its subscriptions.
type Conn struct {
	h   *Hub
	ws  *websocket.Conn
	id  string
	log *slog.Logger

	// ctx ends when the connection starts closing; request handlers use it.
	ctx    context.Context
	cancel context.CancelFunc

	lastRead atomic.Int64 // unix nanos of the last frame received

	qmu         sync.Mutex
	queue       []*outFrame
	qhead       int
	qbytes      int
	latest      map[string]*outFrame // key → newest queued event frame
	closing     bool
	closeCode   websocket.StatusCode
	closeReason string
	wake        chan struct{}
	closingCh   chan struct{}

	subMu    sync.Mutex
	subs     map[string]*topic
	detached bool

	// presence (presence.go)
	since            time.Time
	pmu              sync.Mutex
	userID, userName string
	typingIn         string
	typingUntil      time.Time

	writerDone chan struct{}
	done       chan struct{}
}

type outFrame struct {
	data []byte
	ev   *event // nil for responses and other must-send frames
	// superseded: a newer event with the same key is queued behind this
	// one; a small marker with this seq is sent instead, so seq stays
	// gap-free.
	superseded bool
}

// KindSuperseded marks a snapshot event a lagging connection skipped
// because a newer one of the same key follows. Clients apply nothing.
const KindSuperseded = "superseded"

func supersededFrame(ev *event) []byte {
	b, _ := json.Marshal(eventFrame{Type: "event", Sub: ev.sub, Epoch: ev.epoch, Seq: ev.seq,
		Kind: KindSuperseded, Payload: struct{}{}})
	return b
}

// markerSize approximates a superseded marker for queue accounting.
const markerSize = 160

// Attach registers an accepted WebSocket with the hub. Call Run next.
func (h *Hub) Attach(ws *websocket.Conn, id string, log *slog.Logger) (*Conn, error) {
	if log == nil {
		log = h.log
	}
	ctx, cancel := context.WithCancel(h.ctx)
	c := &Conn{
		h: h, ws: ws, id: id, log: log, ctx: ctx, cancel: cancel,
		latest: map[string]*outFrame{}, wake: make(chan struct{}, 1), closingCh: make(chan struct{}),
		subs: map[string]*topic{}, writerDone: make(chan struct{}), done: make(chan struct{}),
		since: time.Now().UTC(),
	}
	c.lastRead.Store(time.Now().UnixNano())
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		cancel()
		return nil, host.Errorf(host.CodeUnavailable, "server is shutting down")
	}
	h.conns[c] = struct{}{}
	h.mu.Unlock()
	h.stats.conns.Add(1)
	return c, nil
}

// ID is the connection id shown to the client.
func (c *Conn) ID() string { return c.id }

// Context ends when the connection starts closing.
func (c *Conn) Context() context.Context { return c.ctx }

// Done is closed when Run has returned and everything is released.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Run reads frames and hands each text frame to handle, in order, on this
// goroutine; handle must not block for long. Run starts the writer and
// returns once the connection is closed, the writer has stopped and the
// subscriptions are released.
func (c *Conn) Run(handle func(frame []byte)) {
	go c.writeLoop()
	for {
		typ, data, err := c.ws.Read(context.Background())
		if err != nil {
			break
		}
		c.lastRead.Store(time.Now().UnixNano())
		if c.isClosing() {
			continue // drain until the close handshake ends the read
		}
		if typ != websocket.MessageText {
			c.Close(CloseProtocol, "binary frames are not supported")
			continue
		}
		handle(data)
	}
	c.Close(websocket.StatusGoingAway, "")
	<-c.writerDone
	c.h.detach(c)
	close(c.done)
}

// Send queues a frame that must be delivered (responses, ready). It
// reports false when the connection is closing.
func (c *Conn) Send(data []byte) bool { return c.enqueue(&outFrame{data: data}) }

// SendJSON encodes v and queues it.
func (c *Conn) SendJSON(v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		c.log.Error("hub: encode frame", "err", err)
		return false
	}
	return c.Send(b)
}

func (c *Conn) enqueueEvent(ev *event) { c.enqueue(&outFrame{data: ev.data, ev: ev}) }

// enqueue never blocks: it is called under topic locks. Once a watcher lags
// (its queue holds more than an eighth of the cap), snapshot kinds become
// latest-wins: an older unsent event with the same key is superseded by the
// newer one. A queue still over its byte cap closes the connection.
func (c *Conn) enqueue(f *outFrame) bool {
	c.qmu.Lock()
	if c.closing {
		c.qmu.Unlock()
		return false
	}
	if f.ev != nil && f.ev.key != "" {
		if old := c.latest[f.ev.key]; old != nil && !old.superseded && len(old.data) > markerSize &&
			c.qbytes >= c.h.cfg.QueueBytes/8 {
			old.superseded = true
			c.qbytes -= len(old.data) - markerSize
		}
		c.latest[f.ev.key] = f
	}
	c.queue = append(c.queue, f)
	c.qbytes += len(f.data)
	over := c.qbytes > c.h.cfg.QueueBytes && len(c.queue)-c.qhead > 1
	c.qmu.Unlock()
	if over {
		c.h.stats.slow.Add(1)
		c.Close(CloseSlowConsumer, "slow consumer")
		return false
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return true
}

// pop returns the next bytes to write, or nil when the queue is empty.
func (c *Conn) pop() []byte {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if c.qhead == len(c.queue) {
		c.queue, c.qhead = c.queue[:0], 0
		return nil
	}
	f := c.queue[c.qhead]
	c.queue[c.qhead] = nil
	c.qhead++
	if c.qhead >= 1024 && c.qhead*2 >= len(c.queue) { // a queue that never drains must not grow forever
		c.queue = append(c.queue[:0:0], c.queue[c.qhead:]...)
		c.qhead = 0
	}
	if f.ev != nil && f.ev.key != "" && c.latest[f.ev.key] == f {
		delete(c.latest, f.ev.key)
	}
	if f.superseded {
		c.qbytes -= markerSize
		return supersededFrame(f.ev)
	}
	c.qbytes -= len(f.data)
	return f.data
}

func (c *Conn) isClosing() bool {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	return c.closing
}

// Close starts closing with a close code; it never blocks. The writer
// sends the close frame and completes the handshake.
func (c *Conn) Close(code websocket.StatusCode, reason string) {
	c.qmu.Lock()
	if c.closing {
		c.qmu.Unlock()
		return
	}
	c.closing, c.closeCode, c.closeReason = true, code, reason
	c.qmu.Unlock()
	close(c.closingCh)
	c.cancel()
}

// Abort drops the socket without a close handshake (a shutdown whose
// deadline passed).
func (c *Conn) Abort() {
	c.Close(CloseShutdown, "server shutting down")
	_ = c.ws.CloseNow()
}

func (c *Conn) write(data []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.h.cfg.WriteTimeout)
	defer cancel()
	return c.ws.Write(ctx, websocket.MessageText, data)
}

func (c *Conn) writeLoop() {
	defer close(c.writerDone)
	ping := time.NewTicker(c.h.cfg.PingInterval)
	defer ping.Stop()
	for {
		select {
		case <-c.closingCh:
			c.finish()
			return
		case <-c.wake:
			for !c.isClosing() {
				data := c.pop()
				if data == nil {
					break
				}
				if err := c.write(data); err != nil {
					c.Close(websocket.StatusGoingAway, "")
					_ = c.ws.CloseNow()
					return
				}
			}
		case <-ping.C:
			if time.Since(time.Unix(0, c.lastRead.Load())) > c.h.cfg.IdleTimeout {
				c.Close(CloseIdle, "idle timeout")
				continue
			}
			if err := c.write(pingFrame); err != nil {
				c.Close(websocket.StatusGoingAway, "")
				_ = c.ws.CloseNow()
				return
			}
		}
	}
}

// finish flushes what is still queued (briefly; not for a slow consumer)
// and performs the close handshake.
func (c *Conn) finish() {
	c.qmu.Lock()
	code, reason := c.closeCode, c.closeReason
	c.qmu.Unlock()
	if code != CloseSlowConsumer && code != websocket.StatusGoingAway {
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			data := c.pop()
			if data == nil || c.write(data) != nil {
				break
			}
		}
	}
	if code == websocket.StatusGoingAway {
		_ = c.ws.CloseNow() // the peer is gone or went away
		return
	}
	_ = c.ws.Close(code, reason)
}

// detach releases c's subscriptions and forgets it.
func (h *Hub) detach(c *Conn) {
	c.subMu.Lock()
	c.detached = true
	ts := make([]*topic, 0, len(c.subs))
	for _, t := range c.subs {
		ts = append(ts, t)
	}
	c.subMu.Unlock()
	for _, t := range ts {
		if h.unregister(c, t) {
			h.release(t)
		}
	}
	h.mu.Lock()
	delete(h.conns, c)
	h.mu.Unlock()
	h.stats.conns.Add(-1)
	h.presenceWake()
}

// CloseConns closes every connection with 4001 (server shutting down) in
// batches of batch, waiting for each batch to finish its close handshake.
// When ctx ends the remaining sockets are dropped without a handshake.
func (h *Hub) CloseConns(ctx context.Context, batch int) error {
	if batch <= 0 {
		batch = 64
	}
	h.mu.Lock()
	conns := make([]*Conn, 0, len(h.conns))
	for c := range h.conns {
		conns = append(conns, c)
	}
	h.mu.Unlock()
	for i := 0; i < len(conns); i += batch {
		group := conns[i:min(i+batch, len(conns))]
		for _, c := range group {
			c.Close(CloseShutdown, "server shutting down")
		}
		for _, c := range group {
			select {
			case <-c.Done():
			case <-ctx.Done():
				for _, c := range conns[i:] {
					c.Abort()
				}
				return ctx.Err()
			}
		}
	}
	return nil
}
