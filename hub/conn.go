package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"github.com/ensemble-dev/ensemble/protocol"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/ensemble-dev/ensemble/host"
)

// Close codes as the WebSocket library's type; the values are the
// protocol's.
const (
	CloseShutdown        = websocket.StatusCode(protocol.CloseShutdown)
	CloseIdle            = websocket.StatusCode(protocol.CloseIdle)
	CloseSlowConsumer    = websocket.StatusCode(protocol.CloseSlowConsumer)
	CloseTokenExpired    = websocket.StatusCode(protocol.CloseTokenExpired)
	CloseProtocol        = websocket.StatusCode(protocol.CloseProtocol)
	CloseUnauthenticated = websocket.StatusCode(protocol.CloseUnauthenticated)
)

var pingFrame = []byte(`{"type":"ping"}`)

// Batch bounds: what one multi-event frame may carry.
const (
	batchFrames = 64
	batchBytes  = 64 << 10
)

// Wire is the optional socket-level seam under a connection: between
// Begin and End, everything the WebSocket library writes is gathered in
// memory, and End puts it on the socket in one system call under one
// write deadline. Without a Wire each frame is written under its own
// context deadline.
type Wire interface {
	Begin()
	// End writes what was gathered; an error means the socket is unusable
	// (os.ErrDeadlineExceeded when the peer did not read in time).
	End(deadline time.Time) error
	// TryBegin is Begin unless a write holds the socket (then false).
	TryBegin() bool
	// TryEnd writes what was gathered as far as the socket takes it
	// without waiting; pending: End must follow before any other write.
	TryEnd() (pending bool, err error)
}

// ConnOptions configure a connection before it runs.
type ConnOptions struct {
	// Batch: the client speaks ensemble.v2: several events per frame (a
	// JSON array of frames), and a message's end as a message_delta with
	// done rather than the complete message.
	Batch bool
	Wire  Wire
	// Socket and Reader let Start wait for the client's next frame without
	// a goroutine (Linux: the hub's epoll). Socket is the raw socket under
	// the WebSocket (a *net.TCPConn; never one that buffers by itself, like
	// TLS); Reader is the bufio.Reader the library reads it through, whose
	// buffered bytes the socket will not signal again. Without them a
	// goroutine blocks in Read for the connection's life.
	Socket syscall.Conn
	Reader interface{ Buffered() int }
	// Drain is the SocketReader under Reader: whether its last read
	// emptied the socket (edge-triggered polling needs to know).
	Drain interface{ Drained() bool }
	// ExpiredFrame is sent before the close with 4010 once the expiry set
	// by SetExpiry passes.
	ExpiredFrame []byte
}

// Conn is one WebSocket watcher: a reader and its subscriptions. It has
// no writer goroutine while idle: a frame queued on an idle connection
// starts one, which drains the queue and exits. Started with readiness
// polling it has no reader goroutine while idle either: a readable socket
// starts one, which handles what arrived and exits.
type Conn struct {
	h    *Hub
	ws   *websocket.Conn
	id   string
	log  *slog.Logger
	opts ConnOptions

	// ctx ends when the connection starts closing; request handlers use it.
	ctx    context.Context
	cancel context.CancelFunc

	lastRead atomic.Int64 // unix nanos of the last frame received
	expires  atomic.Int64 // unix nanos after which the heartbeat closes it with 4010; 0: never
	slot     uint8        // heartbeat slot: pings are spread over the interval
	slotIdx  int          // index in the hub's list of the slot (under h.mu)
	expIdx   int          // index in the hub's expiry heap, -1: not in it (under h.expMu)
	expAt    int64        // the heap's key (under h.expMu)
	expGone  bool         // detached: no expiry any more (under h.expMu)

	qmu         sync.Mutex
	queue       []*outFrame
	qhead       int
	qbytes      int
	latest      map[string]*outFrame // key → newest queued frame; nil while empty
	writing     bool                 // a flush goroutine owns the socket
	closing     bool
	slowSeen    atomic.Bool // counted as a slow consumer (once)
	closeCode   websocket.StatusCode
	closeReason string

	subMu    sync.Mutex
	subs     []*topic // few per connection: a slice beats a map
	detached bool

	// presence (presence.go)
	since            time.Time
	pmu              sync.Mutex
	userID, userName string
	typingIn         string
	typingUntil      time.Time

	finished chan struct{} // the close handshake is over
	done     chan struct{}

	handle func([]byte) // frames from the client, one at a time, in order
	ended  func()       // Start's: after done

	// The read side under readiness polling (Start on Linux). One party at
	// a time owns it: Start, then the job a poller event starts, which
	// hands it back in rest.
	reg      pollReg // set before polling starts, then read-only
	rmu      sync.Mutex
	brMu     sync.Mutex // the reader's buffer, between reads: the close handshake reads it too
	polled   bool       // the end runs from here (markFinished or a reader), not from Run
	reading  bool       // a read job owns the read side
	again    bool       // an event came while a read job owned it
	closedWS bool       // finish is over: the socket is closed
	over     bool       // the end ran
}

type outFrame struct {
	data []byte
	ev   *event // nil for responses and other must-send frames
	key  string // latest-wins key ("" for none)
	// superseded: a newer frame with the same key is queued behind this
	// one; repl is sent instead (for events a small marker with this
	// seq, so seq stays gap-free).
	superseded bool
	repl       []byte
}

func (f *outFrame) size() int {
	if f.superseded {
		return len(f.repl)
	}
	return len(f.data)
}

func (f *outFrame) bytes() []byte {
	if f.superseded {
		return f.repl
	}
	return f.data
}

func supersededFrame(ev *event) []byte {
	b, _ := json.Marshal(eventFrame{Type: "event", Sub: ev.sub, Epoch: ev.epoch, Seq: ev.seq,
		Kind: protocol.KindSuperseded, Payload: struct{}{}})
	return b
}

// Attach registers an accepted WebSocket with the hub. Call Start (or Run)
// next. log may be shared by every connection: the hub adds the id.
func (h *Hub) Attach(ws *websocket.Conn, id string, log *slog.Logger, opts ConnOptions) (*Conn, error) {
	if log == nil {
		log = h.log
	}
	ctx, cancel := context.WithCancel(h.ctx)
	c := &Conn{
		h: h, ws: ws, id: id, log: log, opts: opts, ctx: ctx, cancel: cancel,
		finished: make(chan struct{}), done: make(chan struct{}),
		since: time.Now().UTC(), expIdx: -1,
	}
	c.lastRead.Store(time.Now().UnixNano())
	h.mu.Lock()
	h.nextSlot++
	c.slot = uint8(h.nextSlot % heartbeatSlots)
	if h.closed {
		h.mu.Unlock()
		cancel()
		return nil, &host.Error{Code: host.CodeUnavailable, Reason: host.ReasonShuttingDown, Message: "server is shutting down"}
	}
	h.conns[c] = struct{}{}
	h.addToSlot(c)
	h.mu.Unlock()
	h.stats.conns.Add(1)
	return c, nil
}

// SetExpiry makes the hub close c with 4010 (after ExpiredFrame) once at
// has passed, replacing an earlier expiry; the zero time clears it. The
// heartbeat's shared ticker checks it: no timer per connection, so the
// close comes up to one heartbeat tick (PingInterval/16) late.
func (c *Conn) SetExpiry(at time.Time) {
	var n int64
	if !at.IsZero() {
		n = max(at.UnixNano(), 1)
	}
	c.h.setExpiry(c, n)
}

// expire closes c if its expiry passed (once).
func (c *Conn) expire(now int64) {
	at := c.expires.Load()
	if at == 0 || now < at || !c.expires.CompareAndSwap(at, 0) {
		return
	}
	if c.opts.ExpiredFrame != nil {
		c.Send(c.opts.ExpiredFrame)
	}
	c.Close(CloseTokenExpired, "token expired")
}

// ID is the connection id shown to the client.
func (c *Conn) ID() string { return c.id }

// Context ends when the connection starts closing.
func (c *Conn) Context() context.Context { return c.ctx }

// Done is closed when Run has returned and everything is released.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Run reads frames and hands each text frame to handle, in order, on this
// goroutine; handle must not block for long. Run returns once the
// connection is closed, the close handshake is over and the subscriptions
// are released. Start does the same without a goroutine per idle
// connection where it can.
func (c *Conn) Run(handle func(frame []byte)) {
	c.handle = handle
	for {
		typ, data, err := c.read()
		if err != nil {
			break
		}
		c.got(typ, data)
	}
	c.Close(websocket.StatusGoingAway, "")
	<-c.finished
	c.h.detach(c)
	close(c.done)
}

// Start serves the connection like Run, without blocking: frames go to
// handle one at a time, in order; ended runs once the connection is closed
// and released (after Done). Where the hub can poll the socket for
// readiness (Linux, ConnOptions.Socket and Reader), an idle connection
// holds no goroutine; elsewhere one goroutine runs Run.
func (c *Conn) Start(handle func(frame []byte), ended func()) {
	c.handle, c.ended = handle, ended
	if !c.h.poll.canPoll(c) || c.h.poll.register(c) != nil {
		go func() {
			c.Run(handle)
			if ended != nil {
				ended()
			}
		}()
		return
	}
	c.rmu.Lock()
	c.polled = true
	if c.closedWS { // closed before it started (a drain, the hub's close)
		c.over = true
		c.rmu.Unlock()
		c.end()
		return
	}
	c.reading = true
	c.rmu.Unlock()
	if err := c.h.poll.add(c); err != nil {
		c.Close(websocket.StatusGoingAway, "") // closed under us: finish ends it
	}
	if c.buffered() > 0 || c.rest() { // frames came with the hello, or right after
		c.h.spawn(c.readFrames)
	}
}

// read reads the next message from the client. The library's Read
// (io.ReadAll) allocates at least 512 bytes per message, which for the
// 15-byte pong every idle client sends each heartbeat was most of an idle
// server's garbage; this reads into a pooled buffer and keeps an exact copy.
func (c *Conn) read() (websocket.MessageType, []byte, error) {
	typ, r, err := c.ws.Reader(context.Background())
	if err != nil {
		return 0, nil, err
	}
	buf := getBuf()
	defer putBuf(buf)
	b := *buf
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			*buf = b[:0]
			return 0, nil, err
		}
	}
	*buf = b[:0]
	return typ, bytes.Clone(b), nil
}

// got handles one frame from the client.
func (c *Conn) got(typ websocket.MessageType, data []byte) {
	c.lastRead.Store(time.Now().UnixNano())
	if c.isClosing() {
		return // drain until the close handshake ends the read
	}
	if typ != websocket.MessageText {
		c.Close(CloseProtocol, "binary frames are not supported")
		return
	}
	c.handle(data)
}

// readable is the poller's event: bytes arrived (or the peer hung up).
// A read job that owns the read side looks at the socket again before it
// hands the side back; otherwise one starts.
func (c *Conn) readable() {
	c.rmu.Lock()
	if c.over {
		c.rmu.Unlock()
		return
	}
	if c.reading {
		c.again = true
		c.rmu.Unlock()
		return
	}
	c.reading = true
	c.rmu.Unlock()
	c.h.spawn(c.readFrames)
}

// readFrames owns the read side: it reads and handles frames until the
// library's reader holds no more bytes and the socket none that came
// since, then hands the side back.
func (c *Conn) readFrames() {
	for {
		typ, data, err := c.read()
		if err != nil {
			c.Close(websocket.StatusGoingAway, "")
			<-c.finished
			c.rmu.Lock()
			c.reading = false
			end := !c.over
			c.over = true
			c.rmu.Unlock()
			if end {
				c.end()
			}
			return
		}
		c.got(typ, data)
		if c.buffered() == 0 && !c.rest() {
			return
		}
	}
}

// buffered reports bytes the library's reader holds, which the socket
// will not signal again. It is only asked between reads, but the close
// handshake reads on its own: finish holds brMu around it.
func (c *Conn) buffered() int {
	c.brMu.Lock()
	defer c.brMu.Unlock()
	return c.opts.Reader.Buffered()
}

// rest hands the read side back, or ends the connection if it closed
// meanwhile. more: an event came while the side was held and the socket
// has bytes, so the caller keeps reading. The registration is
// edge-triggered: bytes that arrive after the side is handed back raise an
// event of their own, bytes that arrived while it was held raised one that
// found it held (again, checked here under rmu), and bytes still in the
// socket from before a read that filled the buffer are looked for.
func (c *Conn) rest() (more bool) {
	if !c.opts.Drain.Drained() && c.h.poll.hasBytes(c) { // the last read filled the buffer
		return true
	}
	for {
		c.rmu.Lock()
		if !c.again {
			c.reading = false
			end := c.closedWS && !c.over
			if end {
				c.over = true
			}
			c.rmu.Unlock()
			if end {
				c.end()
			}
			return false
		}
		c.again = false
		c.rmu.Unlock()
		if c.h.poll.hasBytes(c) {
			return true
		}
	}
}

// markFinished records that the close handshake is over and the socket
// closed; under polling with no reader running, it ends the connection.
func (c *Conn) markFinished() {
	close(c.finished)
	c.rmu.Lock()
	c.closedWS = true
	end := c.polled && !c.reading && !c.over
	if end {
		c.over = true
	}
	c.rmu.Unlock()
	if end {
		c.end()
	}
}

// end releases a polled connection: once, after its socket closed and no
// reader runs.
func (c *Conn) end() {
	c.h.poll.forget(c)
	c.h.detach(c)
	close(c.done)
	if c.ended != nil {
		c.ended()
	}
}

// Send queues a frame that must be delivered (responses, ready). It
// reports false when the connection is closing.
func (c *Conn) Send(data []byte) bool { return c.enqueue(&outFrame{data: data}) }

// SendLatest queues a must-send frame under a latest-wins key: if an
// older frame with the same key is still unsent, it is replaced by its
// repl (a small answer that stands for it), so a client that repeats a
// request without reading holds one full answer in the queue, not many.
func (c *Conn) SendLatest(key string, data, repl []byte) bool {
	return c.enqueue(&outFrame{data: data, key: key, repl: repl})
}

// SendJSON encodes v and queues it.
func (c *Conn) SendJSON(v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		c.log.Error("hub: encode frame", "conn", c.id, "err", err)
		return false
	}
	return c.Send(b)
}

// enqueueEvent queues an event. It reports true when the caller must
// start the writer (writeNow or a flush job): no writer owns the socket.
func (c *Conn) enqueueEvent(ev *event) bool {
	data := ev.data
	if ev.v1 != nil && !c.opts.Batch {
		data = ev.v1
	}
	start, _ := c.push(&outFrame{data: data, ev: ev, key: ev.key})
	return start
}

// enqueue never blocks: it is called under topic locks. Keyed responses
// are always latest-wins. Once a watcher lags (its queue holds more than
// an eighth of the cap), snapshot event kinds become latest-wins too. A
// queue still over its byte cap closes the connection as a slow consumer.
func (c *Conn) enqueue(f *outFrame) bool {
	start, ok := c.push(f)
	if start {
		c.h.spawn(c.flush)
	}
	return ok
}

// push is enqueue without starting the writer: start reports that the
// caller now owns the socket's write side and must start it.
func (c *Conn) push(f *outFrame) (start, ok bool) {
	c.qmu.Lock()
	if c.closing {
		c.qmu.Unlock()
		return false, false
	}
	if f.key != "" {
		if old := c.latest[f.key]; old != nil && !old.superseded && (old.ev == nil || c.qbytes >= c.h.cfg.QueueBytes/8) {
			if old.ev != nil {
				old.repl = supersededFrame(old.ev)
			}
			if len(old.repl) < len(old.data) {
				c.qbytes -= len(old.data) - len(old.repl)
				c.h.stats.queued.Add(int64(len(old.repl) - len(old.data)))
				old.superseded = true
				c.h.stats.superseded.Add(1)
			}
		}
		if c.latest == nil {
			c.latest = map[string]*outFrame{}
		}
		c.latest[f.key] = f
	}
	c.queue = append(c.queue, f)
	c.qbytes += len(f.data)
	c.h.stats.queued.Add(int64(len(f.data)))
	over := c.qbytes > c.h.cfg.QueueBytes && len(c.queue)-c.qhead > 1
	start = !c.writing && !over
	if start {
		c.writing = true
	}
	c.qmu.Unlock()
	if over {
		c.slow("queue over its byte cap")
		return false, false
	}
	return start, true
}

// writeNow starts the writer of a connection whose write side the caller
// owns (push reported start) on the caller's goroutine: what the socket
// takes at once is written right here, with no job handed to a worker and
// no wake-up between a commit and its watchers. Anything that would wait
// (a control frame being written, a full socket, more queued meanwhile, a
// close) goes to a worker, so the caller never waits on one peer.
func (c *Conn) writeNow() {
	w := c.opts.Wire
	if w == nil || !w.TryBegin() {
		c.h.spawn(c.flush)
		return
	}
	var arr [4][]byte
	c.qmu.Lock()
	batch := arr[:0]
	if !c.closing {
		batch = c.take(batch)
	}
	c.qmu.Unlock()
	var err error
	if len(batch) > 0 {
		err = c.gather(batch) // gathered in memory: cannot block
	}
	if c.endNow(err) && len(batch) > 0 {
		c.h.stats.inlineWrites.Add(1)
	}
}

// endNow ends a write the caller began with TryBegin while owning the
// socket's write side. It reports whether the socket took everything.
// What it did not take goes to a worker that waits for it under the
// deadline; so do frames queued meanwhile and a close. Otherwise the
// write side is released.
func (c *Conn) endNow(err error) bool {
	w := c.opts.Wire
	pending, terr := w.TryEnd()
	if err = errors.Join(err, terr); err != nil {
		c.writeFailed(err, false)
		return false
	}
	if pending {
		c.h.spawn(func() {
			if err := w.End(time.Now().Add(c.h.cfg.WriteTimeout)); err != nil {
				c.writeFailed(err, false)
				return
			}
			c.flush()
		})
		return false
	}
	c.qmu.Lock()
	if c.closing || c.qhead < len(c.queue) { // queued meanwhile (enqueue saw a writer), or closing
		c.qmu.Unlock()
		c.h.spawn(c.flush)
		return true
	}
	c.writing = false
	c.qmu.Unlock()
	return true
}

// slow closes a connection that fell too far behind with 4008 and counts it.
// It counts even when the close had already begun: an expired write
// makes the library drop the socket, and the reader may see that first.
func (c *Conn) slow(why string) {
	c.closeWith(CloseSlowConsumer, "slow consumer")
	if c.slowSeen.CompareAndSwap(false, true) {
		c.h.stats.slow.Add(1)
		c.log.Info("hub: slow consumer closed", "conn", c.id, "why", why)
	}
}

// take removes the next frames to write, up to one batch (one frame for a
// client that did not opt in). It returns nil when the queue is empty.
func (c *Conn) take(batch [][]byte) [][]byte {
	n, size := 0, 0
	for c.qhead < len(c.queue) {
		f := c.queue[c.qhead]
		if n > 0 && (!c.opts.Batch || n >= batchFrames || size+f.size() > batchBytes) {
			break
		}
		c.queue[c.qhead] = nil
		c.qhead++
		if f.key != "" && c.latest[f.key] == f {
			delete(c.latest, f.key)
		}
		b := f.bytes()
		c.qbytes -= len(b)
		c.h.stats.queued.Add(-int64(len(b)))
		batch = append(batch, b)
		n++
		size += len(b)
	}
	if c.qhead == len(c.queue) { // drained: hold no buffers while idle
		c.queue, c.qhead, c.latest = nil, 0, nil
	} else if c.qhead >= 1024 && c.qhead*2 >= len(c.queue) { // a queue that never drains must not grow forever
		c.queue = append(c.queue[:0:0], c.queue[c.qhead:]...)
		c.qhead = 0
	}
	return batch
}

// flush is the on-demand writer: it owns the socket until the queue is
// empty, then exits. When the connection starts closing it performs the
// close handshake.
func (c *Conn) flush() {
	var batch [][]byte
	for {
		c.qmu.Lock()
		if c.closing {
			c.qmu.Unlock()
			c.finish()
			return
		}
		batch = c.take(batch[:0])
		if len(batch) == 0 {
			c.writing = false
			c.qmu.Unlock()
			return
		}
		c.qmu.Unlock()
		start := time.Now()
		if err := c.writeBatch(batch); err != nil {
			// The library does not wrap its deadline error; a write that
			// lasted its whole timeout is one.
			c.writeFailed(err, time.Since(start) >= c.h.cfg.WriteTimeout)
			return
		}
		clear(batch)
	}
}

// writeFailed handles a failed write: the socket is unusable (a partial
// frame may be on it), so it is dropped without a handshake. A write that
// timed out is a slow consumer.
func (c *Conn) writeFailed(err error, expired bool) {
	if expired || timedOut(err) {
		c.slow("write timed out")
	} else {
		c.closeWith(websocket.StatusGoingAway, "")
	}
	_ = c.ws.CloseNow()
	c.dropQueue()
	c.markFinished()
}

// dropQueue forgets what a closed connection will never send.
func (c *Conn) dropQueue() {
	c.qmu.Lock()
	c.h.stats.queued.Add(-int64(c.qbytes))
	c.queue, c.qhead, c.qbytes, c.latest = nil, 0, 0, nil
	c.qmu.Unlock()
}

func timedOut(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// writeBatch writes frames: one frame as is, several as one JSON array
// frame (only clients that opted in get several). With a Wire it is one
// system call under one deadline.
func (c *Conn) writeBatch(batch [][]byte) error {
	if w := c.opts.Wire; w != nil {
		w.Begin()
		err := c.gather(batch)
		if eerr := w.End(time.Now().Add(c.h.cfg.WriteTimeout)); err == nil {
			err = eerr
		}
		return err
	}
	return c.gather(batch)
}

// gather hands frames to the library as one message. With a Wire between
// Begin and End it only gathers them in memory; without one it writes.
func (c *Conn) gather(batch [][]byte) error {
	c.h.stats.writes.Add(1)
	c.h.stats.framesWritten.Add(int64(len(batch)))
	data := batch[0]
	var buf *[]byte
	if len(batch) > 1 {
		buf = getBuf()
		b := append((*buf)[:0], '[')
		for i, f := range batch {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, f...)
		}
		data = append(b, ']')
		*buf = data
		defer putBuf(buf)
	}
	return c.write(data)
}

func (c *Conn) write(data []byte) error {
	if c.opts.Wire != nil {
		return c.ws.Write(context.Background(), websocket.MessageText, data) // gathered in memory: cannot block
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.h.cfg.WriteTimeout)
	defer cancel()
	return c.ws.Write(ctx, websocket.MessageText, data)
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, batchBytes+1024); return &b }}

// getBuf returns an empty pooled buffer. Users put buffers back at any
// length (writeBatch's holds the whole batch), and SocketWire appends to
// what it gets, so the length is reset here, once for every user.
func getBuf() *[]byte {
	b := bufPool.Get().(*[]byte)
	*b = (*b)[:0]
	return b
}

func putBuf(b *[]byte) {
	if cap(*b) <= 4*batchBytes { // an oversized one-off goes to the GC
		bufPool.Put(b)
	}
}

func (c *Conn) isClosing() bool {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	return c.closing
}

// Close starts closing with a close code; it never blocks. A writer
// sends the close frame and completes the handshake.
func (c *Conn) Close(code websocket.StatusCode, reason string) { c.closeWith(code, reason) }

// closeWith reports whether this call started the close.
func (c *Conn) closeWith(code websocket.StatusCode, reason string) bool {
	c.qmu.Lock()
	if c.closing {
		c.qmu.Unlock()
		return false
	}
	c.closing, c.closeCode, c.closeReason = true, code, reason
	start := !c.writing
	c.writing = true
	c.qmu.Unlock()
	c.cancel()
	if start {
		go c.finish()
	}
	return true
}

// Abort drops the socket without a close handshake (a shutdown whose
// deadline passed).
func (c *Conn) Abort() {
	c.Close(CloseShutdown, "server shutting down")
	_ = c.ws.CloseNow()
}

// finish flushes what is still queued (briefly; not for a slow consumer)
// and performs the close handshake.
func (c *Conn) finish() {
	defer c.markFinished()
	c.qmu.Lock()
	code, reason := c.closeCode, c.closeReason
	c.qmu.Unlock()
	if code != CloseSlowConsumer && code != websocket.StatusGoingAway {
		deadline := time.Now().Add(time.Second)
		var batch [][]byte
		for time.Now().Before(deadline) {
			c.qmu.Lock()
			batch = c.take(batch[:0])
			c.qmu.Unlock()
			if len(batch) == 0 || c.writeBatch(batch) != nil {
				break
			}
		}
	}
	c.dropQueue()
	if code == websocket.StatusGoingAway {
		_ = c.ws.CloseNow() // the peer is gone or went away
		return
	}
	c.brMu.Lock()
	_ = c.ws.Close(code, reason)
	c.brMu.Unlock()
}

// detach releases c's subscriptions and forgets it.
func (h *Hub) detach(c *Conn) {
	c.subMu.Lock()
	c.detached = true
	ts := append([]*topic(nil), c.subs...)
	c.subMu.Unlock()
	for _, t := range ts {
		if h.unregister(c, t) {
			h.release(t)
		}
	}
	h.mu.Lock()
	delete(h.conns, c)
	h.removeFromSlot(c)
	h.mu.Unlock()
	h.forgetExpiry(c)
	h.stats.conns.Add(-1)
	h.presenceWake()
}

// CloseConns starts closing every connection with closeFn (which must
// start the close, e.g. CloseShutdown after a reconnect hint), all at once,
// then waits for the close handshakes. Every client hears the hint before
// any slow handshake is waited for: a client that stops reading after the
// hint (it waits its jittered delay) holds its handshake for the library's
// close timeout, and waiting batch by batch let the grace period run out
// with most clients never told. The hint's jitter, not the server, spreads
// the reconnects. When ctx ends the remaining sockets are dropped.
func (h *Hub) CloseConns(ctx context.Context, closeFn func(*Conn)) error {
	h.mu.Lock()
	conns := make([]*Conn, 0, len(h.conns))
	for c := range h.conns {
		conns = append(conns, c)
	}
	h.mu.Unlock()
	for _, c := range conns {
		closeFn(c)
	}
	for i, c := range conns {
		select {
		case <-c.Done():
		case <-ctx.Done():
			for _, c := range conns[i:] {
				c.Abort()
			}
			return ctx.Err()
		}
	}
	return nil
}
