package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// driver is a member connection that creates sessions, submits prompts
// and waits for their turns to settle (through its own subscription).
type driver struct {
	c       *Client
	mu      sync.Mutex
	waiters map[string]chan struct{}
	settled map[string]bool
}

func newDriver(ctx context.Context, addr, token string) (*driver, error) {
	d := &driver{waiters: map[string]chan struct{}{}, settled: map[string]bool{}}
	c, err := Dial(ctx, addr, token, DialOptions{OnEvent: d.onEvent})
	if err != nil {
		return nil, err
	}
	d.c = c
	return d, nil
}

type turnPayload struct {
	Turn struct {
		ID        string    `json:"id"`
		Phase     string    `json:"phase"`
		Outcome   string    `json:"outcome"`
		UpdatedAt time.Time `json:"updatedAt"`
	} `json:"turn"`
}

func (d *driver) onEvent(ev *Event, _ time.Time) {
	if ev.Kind != "turn_update" {
		return
	}
	var p turnPayload
	if json.Unmarshal(ev.Payload, &p) != nil || p.Turn.Phase != "settled" {
		return
	}
	d.mu.Lock()
	d.settled[p.Turn.ID] = true
	if ch := d.waiters[p.Turn.ID]; ch != nil {
		close(ch)
		delete(d.waiters, p.Turn.ID)
	}
	d.mu.Unlock()
}

// createSession makes an empty session and subscribes to it.
func (d *driver) createSession(ctx context.Context, ws string) (string, error) {
	var res struct {
		Session struct {
			ID string `json:"id"`
		} `json:"session"`
	}
	if err := d.c.Call(ctx, "session.create", map[string]any{"workspace": ws, "title": "load test"}, &res); err != nil {
		return "", fmt.Errorf("session.create: %w", err)
	}
	if _, err := d.c.Subscribe(ctx, ws, res.Session.ID, nil); err != nil {
		return "", fmt.Errorf("subscribe: %w", err)
	}
	return res.Session.ID, nil
}

// submit sends one prompt and returns its turn id once durably accepted.
func (d *driver) submit(ctx context.Context, ws, sid, csid, text string) (string, error) {
	var res struct {
		Turn struct {
			ID string `json:"id"`
		} `json:"turn"`
	}
	err := d.c.Call(ctx, "turn.message.submit", map[string]any{"workspace": ws, "sessionId": sid,
		"clientSubmitId": csid, "content": map[string]string{"text": text}}, &res)
	if err != nil {
		return "", err
	}
	if res.Turn.ID == "" {
		return "", fmt.Errorf("submit answered without a turn")
	}
	return res.Turn.ID, nil
}

// run submits one prompt and waits for its turn to settle.
func (d *driver) run(ctx context.Context, ws, sid, csid, text string) error {
	tid, err := d.submit(ctx, ws, sid, csid, text)
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	if err := d.wait(ctx, tid); err != nil {
		return fmt.Errorf("turn %s: %w", tid, err)
	}
	return nil
}

// wait blocks until the turn settled.
func (d *driver) wait(ctx context.Context, turnID string) error {
	d.mu.Lock()
	if d.settled[turnID] {
		delete(d.settled, turnID)
		d.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	d.waiters[turnID] = ch
	d.mu.Unlock()
	select {
	case <-ch:
		d.mu.Lock()
		delete(d.settled, turnID)
		d.mu.Unlock()
		return nil
	case <-d.c.Done():
		return ErrClosed
	case <-ctx.Done():
		d.mu.Lock()
		delete(d.waiters, turnID)
		d.mu.Unlock()
		return ctx.Err()
	}
}

// messages pages through a session's whole transcript.
func (d *driver) messages(ctx context.Context, ws, sid string) ([]wireMessage, error) {
	var all []wireMessage
	var after int64
	for range 10000 {
		var page struct {
			Messages []wireMessage `json:"messages"`
			HasMore  bool          `json:"hasMore"`
		}
		if err := d.c.Call(ctx, "message.list", map[string]any{"workspace": ws, "sessionId": sid,
			"afterVersion": after, "limit": 1000}, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Messages...)
		if !page.HasMore || len(page.Messages) == 0 {
			break
		}
		after = page.Messages[len(page.Messages)-1].Version
	}
	return all, nil
}

type wireMessage struct {
	ID        string    `json:"id"`
	SessionID string    `json:"sessionId"`
	Role      string    `json:"role"`
	TurnID    string    `json:"turnId"`
	Version   int64     `json:"version"`
	UpdatedAt time.Time `json:"updatedAt"`
	Content   struct {
		Text string `json:"text"`
	} `json:"content"`
}

// forStamps calls fn with every "@<unix nanos>" emission time in text.
func forStamps(text string, fn func(ns int64)) int {
	n := 0
	for i := 0; i < len(text); i++ {
		if text[i] != '@' {
			continue
		}
		j := i + 1
		var v int64
		for j < len(text) && text[j] >= '0' && text[j] <= '9' && j-i <= 19 {
			v = v*10 + int64(text[j]-'0')
			j++
		}
		if j-i >= 17 { // a plausible nanosecond timestamp
			n++
			if fn != nil {
				fn(v)
			}
		}
		i = j - 1
	}
	return n
}
