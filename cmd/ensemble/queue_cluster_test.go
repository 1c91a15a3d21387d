package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"
)

type queueWire struct {
	SessionID string `json:"sessionId"`
	Revision  int64  `json:"revision"`
	Entries   []struct {
		ID               string `json:"id"`
		Author           string `json:"author"`
		Disposition      string `json:"disposition"`
		AdmittedRevision int64  `json:"admittedRevision"`
	} `json:"entries"`
}

type submitWire struct {
	Disposition   string `json:"disposition"`
	QueueRevision int64  `json:"queueRevision"`
	Replayed      bool   `json:"replayed"`
	Entry         *struct {
		ID string `json:"id"`
	} `json:"entry"`
	Turn *clusterTurn `json:"turn"`
}

// queueWatch subscribes to a session on replica p and returns the queue
// events it receives.
func queueWatch(t *testing.T, c *cluster, p *serverProc, sid string) <-chan queueWire {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	conn, _, err := websocket.Dial(ctx, "ws://"+p.addr+"/v1/ws", &websocket.DialOptions{
		Subprotocols: []string{"ensemble.v1"}, HTTPHeader: http.Header{"Authorization": {"Bearer " + p.token}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseNow() })
	req, _ := json.Marshal(map[string]any{"type": "request", "id": "sub", "op": "subscribe",
		"input": map[string]any{"workspace": c.ws, "topic": "session", "sessionId": sid}})
	if err := conn.Write(ctx, websocket.MessageText, req); err != nil {
		t.Fatal(err)
	}
	out := make(chan queueWire, 64)
	// Wait for the subscribe answer: a change committed before it is in
	// the snapshot's queue, not in an event, so the snapshot counts too.
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("subscribe on %s: %v", p.addr, err)
		}
		var f wsFrame
		if json.Unmarshal(data, &f) != nil || f.Type != "response" || f.ID != "sub" {
			continue
		}
		var res struct {
			Snapshot struct {
				Queue *queueWire `json:"queue"`
			} `json:"snapshot"`
		}
		if !f.OK || json.Unmarshal(f.Result, &res) != nil {
			t.Fatalf("subscribe on %s: %s", p.addr, data)
		}
		if res.Snapshot.Queue != nil {
			out <- *res.Snapshot.Queue
		}
		break
	}
	go func() {
		defer close(out)
		for {
			_, data, err := conn.Read(ctx)
			if err != nil {
				return
			}
			var f wsFrame
			if json.Unmarshal(data, &f) != nil || f.Type != "event" || f.Kind != "queue" {
				continue
			}
			var q queueWire
			if json.Unmarshal(f.Payload, &q) == nil {
				select {
				case out <- q:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

func waitQueue(t *testing.T, events <-chan queueWire, what string, ok func(queueWire) bool) queueWire {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case q, open := <-events:
			if !open {
				t.Fatalf("%s: watcher closed", what)
			}
			if ok(q) {
				return q
			}
		case <-deadline:
			t.Fatalf("%s: no such queue event", what)
		}
	}
}

// TestQueueAcrossReplicas (issue 12): on PostgreSQL + Redis with two
// replicas, a follow-up submitted on the replica that does not own the
// session is queued by the owner; retries on either replica return the
// same entry and admission revision; a watcher on each replica gets the
// queue event; an interrupt on the other replica stops the exact turn and
// the follow-up then runs by itself.
func TestQueueAcrossReplicas(t *testing.T) {
	c := newCluster(t, clusterRedis(t), 2)
	a, z := c.replicas[0], c.replicas[1]
	sid := c.createSession(a)
	run := c.submit(a, sid, "qc-run", "/sim hang")
	onA, onZ := queueWatch(t, c, a, sid), queueWatch(t, c, z, sid)

	body := map[string]any{"clientSubmitId": "qc-1", "content": map[string]any{"text": "/sim words=3 next"}, "placement": "next_turn"}
	var first submitWire
	c.mustRest(z, http.MethodPost, "/sessions/"+sid+"/messages", body, &first, http.StatusOK)
	if first.Disposition != "followup" || first.Entry == nil || first.QueueRevision == 0 {
		t.Fatalf("follow-up on the other replica: %+v", first)
	}
	for name, ev := range map[string]<-chan queueWire{"owner": onA, "other": onZ} {
		waitQueue(t, ev, "queue event on the "+name+" replica", func(q queueWire) bool {
			return q.Revision >= first.QueueRevision && len(q.Entries) == 1 && q.Entries[0].ID == first.Entry.ID
		})
	}
	for _, p := range []*serverProc{a, z} {
		var again submitWire
		c.mustRest(p, http.MethodPost, "/sessions/"+sid+"/messages", body, &again, http.StatusOK)
		if !again.Replayed || again.Entry == nil || again.Entry.ID != first.Entry.ID || again.QueueRevision != first.QueueRevision {
			t.Fatalf("retry on %s: %+v, first %+v", p.addr, again, first)
		}
	}
	var conflict struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	code, err := c.rest(a, http.MethodPost, "/sessions/"+sid+"/messages", map[string]any{"clientSubmitId": "qc-1",
		"content": map[string]any{"text": "something else"}, "placement": "next_turn"}, &conflict)
	if err != nil || code != http.StatusConflict || conflict.Error.Code != "operation_conflict" {
		t.Fatalf("same id, other content: %d %+v %v", code, conflict, err)
	}

	var ir struct {
		Turn clusterTurn `json:"turn"`
	}
	c.mustRest(z, http.MethodPost, "/sessions/"+sid+"/turns/"+run+"/interrupt", map[string]any{}, &ir, http.StatusOK)
	if ir.Turn.ID != run || ir.Turn.Outcome != "canceled" {
		t.Fatalf("interrupt from the other replica: %+v", ir.Turn)
	}
	waitQueue(t, onZ, "the follow-up left the queue", func(q queueWire) bool { return len(q.Entries) == 0 })
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, tr := c.canonical(z, sid)
		if tr.ID != run && tr.Phase == "settled" && tr.Outcome == "completed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the follow-up never ran: newest turn %+v", tr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
