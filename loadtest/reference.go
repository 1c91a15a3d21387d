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
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The reference server is the bare minimum a broadcast over coder/websocket
// needs, with the same hub rules as Ensemble's (encode once, one writer per
// connection from a bounded queue, compression off): no auth, no store, no
// protocol. Clients subscribe with GET /ws?topic=T and get
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

type refConn struct {
	q    chan []byte
	ws   *websocket.Conn
	gone chan struct{}
	once sync.Once
}

func (c *refConn) kill() { c.once.Do(func() { close(c.gone); c.ws.CloseNow() }) }

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

func (s *refServer) handleWS(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("topic")
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return
	}
	ws.SetReadLimit(4 << 10)
	c := &refConn{q: make(chan []byte, 64), ws: ws, gone: make(chan struct{})}
	t := s.topic(name)
	t.mu.Lock()
	hello, _ := json.Marshal(map[string]any{"type": "subscribed", "seq": t.seq})
	c.q <- hello
	t.subs[c] = struct{}{}
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.subs, c)
		t.mu.Unlock()
		c.kill()
	}()
	batch := r.URL.Query().Get("batch") == "1" // the same multi-event frames as ensemble.v2
	go func() {                                // the one writer
		var buf []byte
		for {
			select {
			case b := <-c.q:
				if batch {
					buf = drainBatch(c.q, b, buf[:0])
					b = buf
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := ws.Write(ctx, websocket.MessageText, b)
				cancel()
				if err != nil {
					c.kill()
					return
				}
			case <-c.gone:
				return
			}
		}
	}()
	for { // the one reader: only notices the close
		if _, _, err := ws.Read(context.Background()); err != nil {
			return
		}
	}
}

// drainBatch appends first and whatever else is queued (up to 64 frames
// or 64 KiB, the hub's bounds) to buf: one frame alone, several as a JSON
// array.
func drainBatch(q chan []byte, first, buf []byte) []byte {
	n := 1
	buf = append(buf, first...)
	for n < 64 && len(buf) < 64<<10 {
		select {
		case b := <-q:
			if n == 1 {
				buf = append(append(append(buf[:0], '['), first...), ',')
			} else {
				buf = append(buf, ',')
			}
			buf = append(buf, b...)
			n++
			continue
		default:
		}
		break
	}
	if n > 1 {
		buf = append(buf, ']')
	}
	return buf
}

// publish sends one stamped frame to every subscriber of the topic.
func (s *refServer) publish(t *refTopic, topic string, word string) {
	t.mu.Lock()
	t.seq++
	b := []byte(`{"type":"event","topic":` + strconv.Quote(topic) + `,"seq":` + strconv.FormatInt(t.seq, 10) +
		`,"text":"` + word + "@" + strconv.FormatInt(time.Now().UnixNano(), 10) + `"}`)
	for c := range t.subs {
		select {
		case c.q <- b:
			s.sent.Add(1)
		default:
			c.kill() // slow consumer
		}
	}
	t.mu.Unlock()
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
				for {
					select {
					case <-tick.C:
						s.publish(t, name, "word")
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
