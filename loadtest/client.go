package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// WireError is an operation's error answer.
type WireError struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
	Reason    string `json:"reason,omitempty"`
	// RetryAfterMs is the server's back-off hint (admission control).
	RetryAfterMs int64 `json:"retryAfterMs,omitempty"`
}

func (e *WireError) Error() string { return e.Code + ": " + e.Message }

// Event is one event frame.
type Event struct {
	Sub     string          `json:"sub"`
	Epoch   string          `json:"epoch"`
	Seq     int64           `json:"seq"`
	Kind    string          `json:"kind"`
	Version int64           `json:"version"`
	Payload json.RawMessage `json:"payload"`
}

// frame is every server frame the harness reads.
type frame struct {
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	OK      bool            `json:"ok"`
	Result  json.RawMessage `json:"result"`
	Error   *WireError      `json:"error"`
	Sub     string          `json:"sub"`
	Epoch   string          `json:"epoch"`
	Seq     int64           `json:"seq"`
	Kind    string          `json:"kind"`
	Version int64           `json:"version"`
	Payload json.RawMessage `json:"payload"`
	Reason  string          `json:"reason"`
	AfterMs int64           `json:"afterMs"` // reconnect
}

// SubState is the seq bookkeeping of one subscription on one client:
// events must arrive with seq = last+1 in the subscription's epoch.
type SubState struct {
	Name      string
	Epoch     string
	Seq       int64 // last applied
	Active    bool
	Recovered bool
	// Position is the durable stream position (session topics): where a
	// client resumes on any replica.
	Position *Position
}

// Client is one WebSocket connection speaking the Ensemble protocol.
type Client struct {
	ws      *websocket.Conn
	nextID  atomic.Int64
	onEvent func(ev *Event, at time.Time)

	mu      sync.Mutex
	pending map[string]*call
	subs    map[string]*SubState
	closed  bool
	err     error

	done chan struct{}

	// Counters, read after the client is done or under no load.
	Events     atomic.Int64
	Gaps       atomic.Int64 // an event skipped at least one seq
	Duplicates atomic.Int64 // an event with seq ≤ the last applied one
	Stale      atomic.Int64 // events for a sub before its subscribe answer (allowed by the protocol; discarded)
	EpochMoves atomic.Int64 // an event in another epoch than the subscription's
	Batches    atomic.Int64 // multi-event frames received
	Deferred   atomic.Int64 // subscribes the server deferred with a retryAfterMs hint
	// ReconnectAfterMs is the delay of the server's reconnect frame (a
	// draining replica), -1 while none came.
	ReconnectAfterMs atomic.Int64
}

type call struct {
	ch       chan frame
	onResult func(raw json.RawMessage) // run on the reader goroutine before any later frame
}

// DialOptions tune Dial.
type DialOptions struct {
	// OnEvent is called on the reader goroutine for every in-sequence
	// event; keep it fast.
	OnEvent func(ev *Event, at time.Time)
	// HTTPClient for the upgrade (nil: one of the clients rotating over the
	// source addresses 127.0.0.1 … 127.0.0.16).
	HTTPClient *http.Client
	// NoBatch speaks protocol 1 (one event per frame) instead of offering
	// ensemble.v2.
	NoBatch bool
}

// Dial connects to a replica at addr (host:port), authenticates with a
// hello frame and waits for ready.
func Dial(ctx context.Context, addr, token string, o DialOptions) (*Client, error) {
	if err := CheckLoopback(addr); err != nil {
		return nil, err
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = sourceClient()
	}
	ws, _, err := websocket.Dial(ctx, "ws://"+addr+"/v1/ws", &websocket.DialOptions{
		Subprotocols: subprotocols(o.NoBatch), HTTPClient: hc,
	})
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(16 << 20)
	hello, _ := json.Marshal(map[string]string{"type": "hello", "token": token})
	if err := ws.Write(ctx, websocket.MessageText, hello); err != nil {
		ws.CloseNow()
		return nil, err
	}
	_, data, err := ws.Read(ctx)
	if err != nil {
		ws.CloseNow()
		return nil, err
	}
	// Protocol 2 may batch ready with the frames queued behind it.
	var one frame
	var many []frame
	frames := decodeFrames(data, &one, &many)
	if len(frames) == 0 || frames[0].Type != "ready" {
		ws.CloseNow()
		if len(frames) > 0 && frames[0].Error != nil {
			return nil, frames[0].Error
		}
		return nil, fmt.Errorf("expected ready, got %.200s", data)
	}
	c := &Client{ws: ws, onEvent: o.OnEvent, pending: map[string]*call{}, subs: map[string]*SubState{}, done: make(chan struct{})}
	c.ReconnectAfterMs.Store(-1)
	for _, f := range frames[1:] {
		_ = c.handle(f, time.Now())
	}
	go c.readLoop()
	return c, nil
}

func subprotocols(noBatch bool) []string {
	if noBatch {
		return []string{"ensemble.v1"}
	}
	return []string{"ensemble.v2", "ensemble.v1"}
}

// decodeFrames reads one WebSocket message: a frame, or (protocol 2) a
// JSON array of frames.
func decodeFrames(data []byte, one *frame, many *[]frame) []frame {
	if len(data) > 0 && data[0] == '[' {
		*many = (*many)[:0]
		if json.Unmarshal(data, many) != nil {
			return nil
		}
		return *many
	}
	*one = frame{}
	if json.Unmarshal(data, one) != nil {
		return nil
	}
	return []frame{*one}
}

func (c *Client) readLoop() {
	defer close(c.done)
	var err, frameErr error
	for {
		var data []byte
		_, data, err = c.ws.Read(context.Background())
		if err != nil {
			break
		}
		at := time.Now()
		var one frame
		var many []frame
		frames := decodeFrames(data, &one, &many)
		if len(frames) > 1 {
			c.Batches.Add(1)
		}
		for _, f := range frames {
			if e := c.handle(f, at); e != nil {
				frameErr = e
			}
		}
	}
	if frameErr != nil { // the server's stated reason beats the close that followed
		err = frameErr
	}
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.closed = true
	pend := c.pending
	c.pending = map[string]*call{}
	c.mu.Unlock()
	for _, cl := range pend {
		cl.ch <- frame{Type: "closed"}
	}
}

// handle applies one server frame; it returns the error an error frame
// carries.
func (c *Client) handle(f frame, at time.Time) error {
	switch f.Type {
	case "response":
		c.mu.Lock()
		cl := c.pending[f.ID]
		delete(c.pending, f.ID)
		c.mu.Unlock()
		if cl != nil {
			if f.OK && cl.onResult != nil {
				cl.onResult(f.Result)
			}
			cl.ch <- f
		}
	case "event":
		c.event(&Event{Sub: f.Sub, Epoch: f.Epoch, Seq: f.Seq, Kind: f.Kind, Version: f.Version, Payload: f.Payload}, at)
	case "ping":
		go func() {
			// coder/websocket closes the connection when a write's context
			// ends mid-write; on a saturated machine a 5 s pong write did
			// (10,000-client storm: "use of closed network connection"
			// after resync). Whether the peer is silent is the server's
			// heartbeat to decide, not the harness's.
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_ = c.ws.Write(ctx, websocket.MessageText, []byte(`{"type":"pong"}`))
		}()
	case "unsubscribed":
		c.mu.Lock()
		if s := c.subs[f.Sub]; s != nil {
			s.Active = false
		}
		c.mu.Unlock()
	case "reconnect":
		c.ReconnectAfterMs.Store(f.AfterMs)
	case "error":
		if f.Error != nil {
			return f.Error
		}
	}
	return nil
}

// event checks seq continuity and hands in-sequence events to onEvent.
func (c *Client) event(ev *Event, at time.Time) {
	c.Events.Add(1)
	c.mu.Lock()
	s := c.subs[ev.Sub]
	if s == nil || !s.Active {
		c.mu.Unlock()
		c.Stale.Add(1)
		return
	}
	switch {
	case ev.Epoch != s.Epoch:
		c.EpochMoves.Add(1)
		c.mu.Unlock()
		return
	case ev.Seq <= s.Seq:
		c.Duplicates.Add(1)
		c.mu.Unlock()
		return
	case ev.Seq > s.Seq+1:
		c.Gaps.Add(1)
	}
	s.Seq = ev.Seq
	if p := s.Position; p != nil && ev.Version > p.Version {
		s.Position = &Position{Epoch: p.Epoch, Version: ev.Version}
	}
	c.mu.Unlock()
	if c.onEvent != nil {
		c.onEvent(ev, at)
	}
}

// ErrClosed is returned for calls on a closed connection.
var ErrClosed = errors.New("connection closed")

// Call runs one operation and decodes its result into out (may be nil).
func (c *Client) Call(ctx context.Context, op string, input any, out any) error {
	return c.call(ctx, op, input, out, nil)
}

func (c *Client) call(ctx context.Context, op string, input any, out any, onResult func(json.RawMessage)) error {
	id := "r" + strconv.FormatInt(c.nextID.Add(1), 10)
	b, err := json.Marshal(map[string]any{"type": "request", "id": id, "op": op, "input": input})
	if err != nil {
		return err
	}
	cl := &call{ch: make(chan frame, 1), onResult: onResult}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.pending[id] = cl
	c.mu.Unlock()
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return err
	}
	select {
	case f := <-cl.ch:
		if f.Type == "closed" {
			return ErrClosed
		}
		if !f.OK {
			if f.Error == nil {
				return errors.New("response without ok or error")
			}
			return f.Error
		}
		if out != nil {
			return json.Unmarshal(f.Result, out)
		}
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return ctx.Err()
	}
}

// SubscribeResult is subscribe's answer.
type SubscribeResult struct {
	Sub       string          `json:"sub"`
	Epoch     string          `json:"epoch"`
	Seq       int64           `json:"seq"`
	Recovered bool            `json:"recovered"`
	Position  *Position       `json:"position"`
	Snapshot  json.RawMessage `json:"snapshot"`
}

// Resume is a subscription's resume point on the replica that served it:
// the per-subscription epoch and seq, and (session topics) the durable
// position, which any replica recovers from.
type Resume struct {
	Epoch    string    `json:"epoch"`
	Seq      int64     `json:"seq"`
	Position *Position `json:"-"`
}

// Position is a durable session stream position.
type Position struct {
	Epoch   string `json:"epoch"`
	Version int64  `json:"version"`
}

// Subscribe subscribes to a session topic (sessionID != "") or the
// workspace topic, optionally resuming. The subscription's seq state is set
// on the reader goroutine before any later event is processed.
func (c *Client) Subscribe(ctx context.Context, workspace, sessionID string, resume *Resume) (SubscribeResult, error) {
	in := map[string]any{"workspace": workspace, "topic": "workspace"}
	if sessionID != "" {
		in["topic"], in["sessionId"] = "session", sessionID
	}
	if resume != nil {
		if resume.Epoch != "" {
			in["resume"] = resume
		}
		if resume.Position != nil && sessionID != "" {
			in["position"] = resume.Position
		}
	}
	for {
		var res SubscribeResult
		err := c.call(ctx, "subscribe", in, &res, func(raw json.RawMessage) {
			var r SubscribeResult
			if json.Unmarshal(raw, &r) != nil {
				return
			}
			c.mu.Lock()
			c.subs[r.Sub] = &SubState{Name: r.Sub, Epoch: r.Epoch, Seq: r.Seq, Active: true, Recovered: r.Recovered, Position: r.Position}
			c.mu.Unlock()
		})
		var we *WireError
		if !errors.As(err, &we) || we.RetryAfterMs <= 0 {
			return res, err
		}
		// Admission control: obey the server's back-off hint.
		c.Deferred.Add(1)
		select {
		case <-time.After(time.Duration(we.RetryAfterMs) * time.Millisecond):
		case <-ctx.Done():
			return res, err
		}
	}
}

// Sub returns a copy of a subscription's state.
func (c *Client) Sub(name string) (SubState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.subs[name]
	if !ok {
		return SubState{}, false
	}
	return *s, true
}

// Done is closed when the connection is gone.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is why the connection ended (nil while open or on a clean close).
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close closes the connection normally.
func (c *Client) Close() {
	_ = c.ws.Close(websocket.StatusNormalClosure, "")
}

// Drop abandons the connection at once, without a close handshake (what a
// network failure looks like to the server).
func (c *Client) Drop() { _ = c.ws.CloseNow() }
