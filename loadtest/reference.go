package loadtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/ensemble-dev/ensemble/hub"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The reference server is the bare minimum a broadcast over coder/websocket
// needs, with the same hub rules as Ensemble's (encode once, frames queued
// per connection and written by whoever owns its socket, compression off):
// no auth, no store, no protocol. Like the hub, a publisher writes a frame
// itself when the connection is idle and its socket takes the frame at
// once (hub.SocketWire), and hands the connection to its writer goroutine
// otherwise. Clients subscribe with GET /ws?topic=T and get
// {"type":"subscribed","seq":N}, then every frame published to T with a
// gap-free seq. POST /publish starts in-server publishers (standing in for
// the agent, which also runs inside the Ensemble server) that stamp every
// frame with its emission time, like "/sim stamp". GET /metrics has the Go
// and process collectors under the same names as Ensemble's.

type refTopic struct {
	mu   sync.Mutex
	seq  int64
	subs map[*refConn]struct{}
}

// refMaxQueued frames unsent make a connection a slow consumer.
const refMaxQueued = 64

type refConn struct {
	ws    *websocket.Conn
	wire  *hub.SocketWire
	batch bool // the same multi-event frames as ensemble.v2

	mu      sync.Mutex
	queue   [][]byte
	writing bool          // a publisher or the writer goroutine owns the socket
	wake    chan struct{} // hands the socket to the writer goroutine
	gone    chan struct{}
	once    sync.Once
}

func (c *refConn) kill() { c.once.Do(func() { close(c.gone); c.ws.CloseNow() }) }

// push queues b; start reports that the caller now owns the socket. A
// connection that lets refMaxQueued frames pile up is closed.
func (c *refConn) push(b []byte) (start, ok bool) {
	c.mu.Lock()
	if len(c.queue) >= refMaxQueued {
		c.mu.Unlock()
		c.kill()
		return false, false
	}
	c.queue = append(c.queue, b)
	start = !c.writing
	c.writing = true
	c.mu.Unlock()
	return start, true
}

// take removes the next frame to write: one, or (batch) everything queued
// up to 64 frames or 64 KiB, the hub's bounds, as one JSON array.
func (c *refConn) take(buf []byte) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 {
		c.writing = false
		return nil
	}
	n := 1
	if c.batch {
		for size := len(c.queue[0]); n < len(c.queue) && n < 64 && size+len(c.queue[n]) < 64<<10; n++ {
			size += len(c.queue[n])
		}
	}
	if n == 1 {
		buf = append(buf[:0], c.queue[0]...)
	} else {
		buf = append(buf[:0], '[')
		for i, f := range c.queue[:n] {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = append(buf, f...)
		}
		buf = append(buf, ']')
	}
	c.queue = append(c.queue[:0], c.queue[n:]...)
	return buf
}

// writeNow writes what is queued on the caller's goroutine as far as the
// socket takes it at once; anything that would wait goes to the writer.
func (c *refConn) writeNow() {
	if !c.wire.TryBegin() {
		c.wake <- struct{}{}
		return
	}
	var err error
	if b := c.take(nil); b != nil {
		err = c.ws.Write(context.Background(), websocket.MessageText, b) // gathered in memory
	}
	pending, terr := c.wire.TryEnd()
	if err != nil || terr != nil {
		c.kill()
		return
	}
	c.mu.Lock()
	more := len(c.queue) > 0
	if !pending && !more {
		c.writing = false
	}
	c.mu.Unlock()
	if pending || more {
		c.wake <- struct{}{}
	}
}

// writer owns the socket when a publisher hands it over: it writes what
// is left and queued, under a deadline, until the queue is empty.
func (c *refConn) writer() {
	var buf []byte
	for {
		select {
		case <-c.wake:
		case <-c.gone:
			return
		}
		if err := c.wire.End(time.Now().Add(10 * time.Second)); err != nil {
			c.kill()
			return
		}
		for {
			if buf = c.take(buf); buf == nil {
				break
			}
			c.wire.Begin()
			err := c.ws.Write(context.Background(), websocket.MessageText, buf)
			if err = errors.Join(err, c.wire.End(time.Now().Add(10*time.Second))); err != nil {
				c.kill()
				return
			}
		}
	}
}

type refServer struct {
	mu     sync.Mutex
	topics map[string]*refTopic
	sent   atomic.Int64
}

func (s *refServer) topic(name string) *refTopic {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.topics[name]
	if t == nil {
		t = &refTopic{subs: map[*refConn]struct{}{}}
		s.topics[name] = t
	}
	return t
}

// refHijack puts a hub.SocketWire under the library's writer, as the
// Ensemble server does.
type refHijack struct {
	http.ResponseWriter
	wire *hub.SocketWire
}

func (w *refHijack) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.wire = hub.NewSocketWire(nc)
	return nc, bufio.NewReadWriter(brw.Reader, bufio.NewWriterSize(w.wire, 16)), nil
}

func (s *refServer) handleWS(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("topic")
	hw := &refHijack{ResponseWriter: w}
	ws, err := websocket.Accept(hw, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return
	}
	ws.SetReadLimit(4 << 10)
	c := &refConn{ws: ws, wire: hw.wire, batch: r.URL.Query().Get("batch") == "1", wake: make(chan struct{}, 1), gone: make(chan struct{})}
	go c.writer()
	t := s.topic(name)
	t.mu.Lock()
	hello, _ := json.Marshal(map[string]any{"type": "subscribed", "seq": t.seq})
	start, _ := c.push(hello)
	t.subs[c] = struct{}{}
	t.mu.Unlock()
	if start {
		c.wake <- struct{}{}
	}
	defer func() {
		t.mu.Lock()
		delete(t.subs, c)
		t.mu.Unlock()
		c.kill()
	}()
	for { // the one reader: only notices the close
		if _, _, err := ws.Read(context.Background()); err != nil {
			return
		}
	}
}

// publish sends one stamped frame to every subscriber of the topic,
// writing it itself to those whose sockets take it at once.
func (s *refServer) publish(t *refTopic, topic string, word string, start []*refConn) []*refConn {
	t.mu.Lock()
	t.seq++
	b := []byte(`{"type":"event","topic":` + strconv.Quote(topic) + `,"seq":` + strconv.FormatInt(t.seq, 10) +
		`,"text":"` + word + "@" + strconv.FormatInt(time.Now().UnixNano(), 10) + `"}`)
	start = start[:0]
	for c := range t.subs {
		own, ok := c.push(b)
		if own {
			start = append(start, c)
		}
		if ok {
			s.sent.Add(1)
		}
	}
	t.mu.Unlock()
	for _, c := range start {
		c.writeNow()
	}
	return start
}

func (s *refServer) handlePublish(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	topics, _ := strconv.Atoi(q.Get("topics"))
	pubs, _ := strconv.Atoi(q.Get("publishers"))
	rate, err1 := time.ParseDuration(q.Get("rate"))
	dur, err2 := time.ParseDuration(q.Get("duration"))
	if topics <= 0 || pubs <= 0 || err1 != nil || err2 != nil || rate <= 0 || dur <= 0 || dur > time.Hour {
		http.Error(w, "want topics, publishers, rate, duration", http.StatusBadRequest)
		return
	}
	prefix := q.Get("prefix")
	for i := range topics {
		name := prefix + strconv.Itoa(i)
		t := s.topic(name)
		for range pubs {
			go func() {
				tick := time.NewTicker(rate)
				defer tick.Stop()
				end := time.After(dur)
				var start []*refConn
				for {
					select {
					case <-tick.C:
						start = s.publish(t, name, "word", start)
					case <-end:
						return
					}
				}
			}()
		}
	}
	w.WriteHeader(http.StatusAccepted)
}

// ServeReference serves the reference broadcast server on ln until ctx ends.
func ServeReference(ctx context.Context, ln net.Listener) error {
	s := &refServer{topics: map[string]*refTopic{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws", s.handleWS)
	mux.HandleFunc("POST /publish", s.handlePublish)
	mux.Handle("GET /metrics", promhttp.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// RefServer is a running reference server.
type RefServer struct {
	Addr string
	PID  int
	stop func()
	cmd  *exec.Cmd
	done chan struct{}
}

// Stop ends it.
func (r *RefServer) Stop() {
	if r.cmd != nil {
		_ = r.cmd.Process.Kill()
		<-r.done
		return
	}
	r.stop()
}

// StartReference runs the reference server as its own process (`binary
// loadtest reference-server`), like an Ensemble replica, so neither shares
// a Go runtime with the load generator; without a binary it runs in this
// process.
func StartReference(ctx context.Context, binary string) (*RefServer, error) {
	if binary == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() { defer close(done); _ = ServeReference(ctx, ln) }()
		return &RefServer{Addr: ln.Addr().String(), PID: os.Getpid(), stop: func() { cancel(); <-done }}, nil
	}
	cmd := exec.Command(binary, "loadtest", "reference-server", "--addr", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &RefServer{PID: cmd.Process.Pid, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(r.done) }()
	addrCh := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "reference server listening on "); ok {
				addrCh <- a
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case r.Addr = <-addrCh:
		return r, nil
	case <-r.done:
		return nil, fmt.Errorf("reference server exited at start")
	case <-time.After(30 * time.Second):
		r.Stop()
		return nil, fmt.Errorf("reference server did not start within 30s")
	}
}

// refClient is one subscriber of the reference server.
type refClient struct {
	ws   *websocket.Conn
	seq  int64
	done chan struct{}
}

type refEvent struct {
	Seq  int64  `json:"seq"`
	Text string `json:"text"`
}

// dialRef subscribes to a topic and waits for the subscribed frame; each
// later frame goes to onFrame (stamp text and seq) on the reader goroutine.
func dialRef(ctx context.Context, addr, topic string, gaps, dups *atomic.Int64, onFrame func(text string, at time.Time)) (*refClient, error) {
	ws, _, err := websocket.Dial(ctx, "ws://"+addr+"/ws?batch=1&topic="+topic, &websocket.DialOptions{HTTPClient: sourceClient()})
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(1 << 20)
	_, data, err := ws.Read(ctx)
	if err != nil {
		ws.CloseNow()
		return nil, err
	}
	var hello struct {
		Type string `json:"type"`
		Seq  int64  `json:"seq"`
	}
	if json.Unmarshal(data, &hello) != nil || hello.Type != "subscribed" {
		ws.CloseNow()
		return nil, fmt.Errorf("reference: unexpected first frame %.100s", data)
	}
	c := &refClient{ws: ws, seq: hello.Seq, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			_, data, err := ws.Read(context.Background())
			if err != nil {
				return
			}
			at := time.Now()
			if len(data) > 0 && data[0] != '[' {
				data = append(append([]byte{'['}, data...), ']')
			}
			var evs []refEvent
			if json.Unmarshal(data, &evs) != nil {
				continue
			}
			for _, ev := range evs {
				switch {
				case ev.Seq <= c.seq:
					dups.Add(1)
					continue
				case ev.Seq > c.seq+1:
					gaps.Add(1)
				}
				c.seq = ev.Seq
				if onFrame != nil {
					onFrame(ev.Text, at)
				}
			}
		}
	}()
	return c, nil
}

// startPublishers asks the reference server to publish.
func startPublishers(ctx context.Context, addr, prefix string, topics, pubs int, rate, dur time.Duration) error {
	u := fmt.Sprintf("http://%s/publish?prefix=%s&topics=%d&publishers=%d&rate=%s&duration=%s", addr, prefix, topics, pubs, rate, dur)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("reference publish: %s", resp.Status)
	}
	return nil
}
