package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// eventLog is a WebSocket client on one replica subscribed to the
// workspace topic and one session topic; it records which sessions were
// removed and which were (re)announced on each, and every id a
// trash_changed named ("workspace:trash_changed:purged:<id>").
type eventLog struct {
	mu      sync.Mutex
	seen    map[string]bool // "<topic>:<kind>:<sessionId>"
	changed chan struct{}
}

func (c *cluster) eventLog(p *serverProc, sid string) *eventLog {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn, _, err := websocket.Dial(ctx, "ws://"+p.addr+"/v1/ws", &websocket.DialOptions{
		Subprotocols: []string{"ensemble.v1"},
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + p.token}},
	})
	if err != nil {
		cancel()
		c.t.Fatalf("dial %s: %v", p.addr, err)
	}
	conn.SetReadLimit(16 << 20)
	l := &eventLog{seen: map[string]bool{}, changed: make(chan struct{}, 1)}
	subs := map[string]string{} // sub id → topic
	var subsMu sync.Mutex
	done := make(chan struct{})
	c.t.Cleanup(func() { cancel(); conn.CloseNow(); <-done })
	go func() {
		defer close(done)
		for {
			_, data, err := conn.Read(ctx)
			if err != nil {
				return
			}
			var f wsFrame
			if json.Unmarshal(data, &f) != nil {
				continue
			}
			if f.Type == "ping" {
				_ = conn.Write(ctx, websocket.MessageText, []byte(`{"type":"pong"}`))
			}
			if f.Type == "response" && f.OK {
				var r struct {
					Sub string `json:"sub"`
				}
				_ = json.Unmarshal(f.Result, &r)
				subsMu.Lock()
				subs[r.Sub] = f.ID
				subsMu.Unlock()
				l.mu.Lock()
				l.seen["response:"+f.ID] = true
				l.mu.Unlock()
				select {
				case l.changed <- struct{}{}:
				default:
				}
			}
			if f.Type != "event" {
				continue
			}
			var p struct {
				SessionID string `json:"sessionId"`
				Session   struct {
					ID string `json:"id"`
				} `json:"session"`
				// trash_changed
				Deleted, Restored, Purged []string
			}
			_ = json.Unmarshal(f.Payload, &p)
			id := p.SessionID
			if id == "" {
				id = p.Session.ID
			}
			subsMu.Lock()
			topic := subs[f.Sub]
			subsMu.Unlock()
			l.mu.Lock()
			l.seen[topic+":"+f.Kind+":"+id] = true
			for what, ids := range map[string][]string{"deleted": p.Deleted, "restored": p.Restored, "purged": p.Purged} {
				for _, x := range ids {
					l.seen[topic+":"+f.Kind+":"+what+":"+x] = true
				}
			}
			l.mu.Unlock()
			select {
			case l.changed <- struct{}{}:
			default:
			}
		}
	}()
	write := func(id string, in map[string]any) {
		req, _ := json.Marshal(map[string]any{"type": "request", "id": id, "op": "subscribe", "input": in})
		if err := conn.Write(ctx, websocket.MessageText, req); err != nil {
			c.t.Fatalf("subscribe: %v", err)
		}
	}
	write("workspace", map[string]any{"workspace": c.ws, "topic": "workspace"})
	write("session", map[string]any{"workspace": c.ws, "topic": "session", "sessionId": sid})
	l.wait(c.t, "response:workspace", "response:session")
	return l
}

func (l *eventLog) wait(t *testing.T, keys ...string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		l.mu.Lock()
		missing := slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return l.seen[k] })
		l.mu.Unlock()
		if len(missing) == 0 {
			return
		}
		select {
		case <-l.changed:
		case <-deadline:
			t.Fatalf("never saw %v", missing)
		}
	}
}

func (l *eventLog) forget() {
	l.mu.Lock()
	l.seen = map[string]bool{}
	l.mu.Unlock()
}

// A session with a live turn owned by replica A is deleted through B: the
// coordinator on B ends the turn on A (the owner), watchers on A and B get
// session_removed on both topics, and a restore on A brings it back for
// the watchers on B.
func TestClusterDeleteOnOneReplicaRemovesEverywhere(t *testing.T) {
	c := newCluster(t, clusterRedis(t), 2)
	a, b := c.replicas[0], c.replicas[1]
	sid := c.createSession(a)
	turnID := c.submit(a, sid, "del-1", "/sim hang")
	wa, wb := c.eventLog(a, sid), c.eventLog(b, sid)

	var del struct {
		DeletedSessionIDs []string `json:"deletedSessionIds"`
	}
	c.mustRest(b, http.MethodDelete, "/sessions/"+sid, nil, &del, http.StatusOK)
	if !slices.Equal(del.DeletedSessionIDs, []string{sid}) {
		t.Fatalf("delete: %+v", del)
	}
	for _, l := range []*eventLog{wa, wb} {
		l.wait(t, "workspace:session_removed:"+sid, "session:session_removed:"+sid, "workspace:trash_changed:deleted:"+sid)
	}
	if code, _ := c.rest(a, http.MethodGet, "/sessions/"+sid, nil, nil); code != http.StatusNotFound {
		t.Fatalf("get on A after delete: %d", code)
	}
	var trash struct {
		Sessions []struct {
			Session struct {
				ID string `json:"id"`
			} `json:"session"`
		} `json:"sessions"`
	}
	c.mustRest(a, http.MethodGet, "/trash", nil, &trash, http.StatusOK)
	if len(trash.Sessions) != 1 || trash.Sessions[0].Session.ID != sid {
		t.Fatalf("trash on A: %+v", trash)
	}

	wb.forget()
	c.mustRest(a, http.MethodPost, "/sessions/"+sid+"/restore", map[string]any{}, nil, http.StatusOK)
	wb.wait(t, "workspace:session_summary:"+sid, "session:session_summary:"+sid, "workspace:trash_changed:restored:"+sid)
	// The live turn was ended by the delete, not left running.
	tr := c.waitSettled(b, sid, turnID)
	if tr.Outcome == "completed" {
		t.Fatalf("hung turn settled completed: %+v", tr)
	}
	// And the restored session works on either replica.
	c.waitSettled(b, sid, c.submit(b, sid, "del-2", "/sim words=3"))
}

// Two replicas purge the same trees at the same time: each tree is removed
// by exactly one of them. Background retention, running on both replicas,
// then empties the Trash of what is older than the retention. Workspace
// watchers on both replicas hear every purge as trash_changed.
func TestClusterConcurrentPurgeRemovesEachTreeOnce(t *testing.T) {
	c := newCluster(t, clusterRedis(t), 2, "--trash-retention", "3s", "--trash-purge-interval", "500ms")
	a, b := c.replicas[0], c.replicas[1]
	var ids []string
	for i := range 12 {
		sid := c.createSession(a)
		c.waitSettled(a, sid, c.submit(a, sid, fmt.Sprintf("pg-%d", i), "/sim words=2"))
		ids = append(ids, sid)
	}
	wa, wb := c.eventLog(a, ids[0]), c.eventLog(b, ids[0])
	c.mustRest(a, http.MethodPost, "/sessions/delete", map[string]any{"sessionIds": ids}, nil, http.StatusOK)

	type purgeRes struct {
		Purged []struct {
			RootSessionID string `json:"rootSessionId"`
		} `json:"purged"`
	}
	var wg sync.WaitGroup
	results := make([]purgeRes, 2)
	codes := make([]int, 2)
	for i, p := range []*serverProc{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], _ = c.rest(p, http.MethodPost, "/trash/purge", map[string]any{"sessionIds": ids}, &results[i])
		}()
	}
	wg.Wait()
	count := map[string]int{}
	for i, r := range results {
		// A replica that found a tree already gone before its pre-check
		// answers not_found for the whole batch; it purged nothing.
		if codes[i] != http.StatusOK && codes[i] != http.StatusNotFound {
			t.Fatalf("purge on replica %d: %d", i, codes[i])
		}
		for _, x := range r.Purged {
			count[x.RootSessionID]++
		}
	}
	var purgedKeys []string
	for _, id := range ids {
		if count[id] != 1 {
			t.Fatalf("tree %s purged %d times (%v)", id, count[id], count)
		}
		purgedKeys = append(purgedKeys, "workspace:trash_changed:purged:"+id)
	}
	wa.wait(t, purgedKeys...)
	wb.wait(t, purgedKeys...)

	// Retention: a fresh deletion is purged by the background pass.
	sid := c.createSession(b)
	c.mustRest(b, http.MethodDelete, "/sessions/"+sid, nil, nil, http.StatusOK)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var trash struct {
			Sessions []json.RawMessage `json:"sessions"`
		}
		c.mustRest(a, http.MethodGet, "/trash", nil, &trash, http.StatusOK)
		if len(trash.Sessions) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("retention never purged the trash: %d left", len(trash.Sessions))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, _ := c.rest(b, http.MethodPost, "/sessions/"+sid+"/restore", map[string]any{}, nil); code != http.StatusNotFound {
		t.Fatalf("restore after retention: %d, want 404", code)
	}
	// Whichever replica ran the retention pass, both replicas' watchers
	// are told.
	wa.wait(t, "workspace:trash_changed:purged:"+sid)
	wb.wait(t, "workspace:trash_changed:purged:"+sid)
}
