package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/ensemble-dev/ensemble/host"
)

// Interactions end to end against the real binary: collaborators on their
// own WebSocket connections, agents as real processes, crashes by SIGKILL.

// ixTree is an interaction_snapshot payload (or a snapshot's interactionTree).
type ixTree struct {
	RootSessionID string             `json:"rootSessionId"`
	TurnID        string             `json:"turnId"`
	Interactions  []host.Interaction `json:"interactions"`
}

type ixFrame struct {
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	OK      bool            `json:"ok"`
	Result  json.RawMessage `json:"result"`
	Error   *struct{ Code, Message string }
	Kind    string          `json:"kind"`
	Payload json.RawMessage `json:"payload"`
}

// ixClient is one collaborator's WebSocket connection.
type ixClient struct {
	t      *testing.T
	c      *websocket.Conn
	cancel context.CancelFunc
	done   chan struct{}
	nextID atomic.Int64

	mu      sync.Mutex
	waiting map[string]chan ixFrame
	tree    *ixTree
	rawTree string
}

func ixToken(t *testing.T, dataDir, user, name string) string {
	t.Helper()
	out, err := exec.Command(ensembleBinary(t), "token", "--data-dir", dataDir, "--sub", user, "--name", name,
		"--role", "member", "--workspace", "default").Output()
	if err != nil {
		t.Fatalf("ensemble token: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func ixDial(t *testing.T, addr, token string) *ixClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	c, _, err := websocket.Dial(dctx, "ws://"+addr+"/v1/ws", &websocket.DialOptions{
		Subprotocols: []string{"ensemble.v1"},
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + token}},
	})
	if err != nil {
		cancel()
		t.Fatalf("dial: %v", err)
	}
	c.SetReadLimit(16 << 20)
	cl := &ixClient{t: t, c: c, cancel: cancel, done: make(chan struct{}), waiting: map[string]chan ixFrame{}}
	go cl.read(ctx)
	t.Cleanup(func() {
		cancel()
		_ = c.Close(websocket.StatusNormalClosure, "")
		<-cl.done
	})
	return cl
}

func (cl *ixClient) read(ctx context.Context) {
	defer close(cl.done)
	for {
		_, data, err := cl.c.Read(ctx)
		if err != nil {
			return
		}
		var f ixFrame
		if json.Unmarshal(data, &f) != nil {
			continue
		}
		switch {
		case f.Type == "response":
			cl.mu.Lock()
			ch := cl.waiting[f.ID]
			delete(cl.waiting, f.ID)
			cl.mu.Unlock()
			if ch != nil {
				ch <- f
			}
		case f.Type == "event" && f.Kind == "interaction_snapshot":
			cl.setTree(f.Payload)
		}
	}
}

func (cl *ixClient) setTree(raw json.RawMessage) {
	var tr ixTree
	if json.Unmarshal(raw, &tr) != nil {
		return
	}
	cl.mu.Lock()
	cl.tree, cl.rawTree = &tr, string(raw)
	cl.mu.Unlock()
}

// request runs one operation and returns its response frame.
func (cl *ixClient) request(op string, input any) ixFrame {
	cl.t.Helper()
	id := "r" + strconv.FormatInt(cl.nextID.Add(1), 10)
	ch := make(chan ixFrame, 1)
	cl.mu.Lock()
	cl.waiting[id] = ch
	cl.mu.Unlock()
	b, _ := json.Marshal(map[string]any{"type": "request", "id": id, "op": op, "input": input})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.c.Write(ctx, websocket.MessageText, b); err != nil {
		cl.t.Fatalf("%s: write: %v", op, err)
	}
	select {
	case f := <-ch:
		return f
	case <-ctx.Done():
		cl.t.Fatalf("%s: no response", op)
		return ixFrame{}
	}
}

func (cl *ixClient) subscribe(sessionID string) {
	cl.t.Helper()
	f := cl.request("subscribe", map[string]any{"workspace": "default", "topic": "session", "sessionId": sessionID})
	if !f.OK {
		cl.t.Fatalf("subscribe: %+v", f.Error)
	}
	var res struct {
		Snapshot struct {
			InteractionTree json.RawMessage `json:"interactionTree"`
		} `json:"snapshot"`
	}
	_ = json.Unmarshal(f.Result, &res)
	if len(res.Snapshot.InteractionTree) > 0 {
		cl.mu.Lock()
		have := cl.tree != nil
		cl.mu.Unlock()
		if !have { // an event that overtook the response is newer
			cl.setTree(res.Snapshot.InteractionTree)
		}
	}
}

// waitTree waits until the client's latest tree satisfies ok.
func (cl *ixClient) waitTree(what string, ok func(ixTree) bool) (ixTree, string) {
	cl.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		cl.mu.Lock()
		tr, raw := cl.tree, cl.rawTree
		cl.mu.Unlock()
		if tr != nil && ok(*tr) {
			return *tr, raw
		}
		if time.Now().After(deadline) {
			cl.t.Fatalf("the interaction tree never became %s (last %s)", what, raw)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func onePending(tr ixTree) bool {
	return len(tr.Interactions) == 1 && tr.Interactions[0].State == host.InteractionPending
}

func (cl *ixClient) respond(it host.Interaction, option string, payload any) (string, error) {
	resp := map[string]any{"optionId": option}
	if payload != nil {
		resp["payload"] = payload
	}
	f := cl.request("interaction.respond", map[string]any{"workspace": "default", "sessionId": it.SessionID,
		"turnId": it.TurnID, "requestId": it.RequestID, "response": resp})
	if !f.OK {
		return "", fmt.Errorf("%s: %s", f.Error.Code, f.Error.Message)
	}
	var res struct {
		Disposition string `json:"disposition"`
	}
	_ = json.Unmarshal(f.Result, &res)
	return res.Disposition, nil
}

func (p *serverProc) createSession(t *testing.T) string {
	t.Helper()
	var created struct {
		Session struct {
			ID string `json:"id"`
		} `json:"session"`
	}
	if code := p.call(t, http.MethodPost, "/sessions", map[string]any{}, &created); code != http.StatusCreated {
		t.Fatalf("session.create: %d; stderr:\n%s", code, p.stderr)
	}
	return created.Session.ID
}

func (p *serverProc) submit(t *testing.T, sessionID, id, text string) wireTurn {
	t.Helper()
	var sent struct {
		Turn wireTurn `json:"turn"`
	}
	if code := p.call(t, http.MethodPost, "/sessions/"+sessionID+"/messages", map[string]any{
		"clientSubmitId": id, "content": map[string]any{"text": text},
	}, &sent); code != http.StatusOK {
		t.Fatalf("submit %q: %d; stderr:\n%s", text, code, p.stderr)
	}
	return sent.Turn
}

type ixTurn struct {
	ID             string `json:"id"`
	Phase          string `json:"phase"`
	Outcome        string `json:"outcome"`
	ClientSubmitID string `json:"clientSubmitId"`
	SubmittedBy    string `json:"submittedBy"`
}

func (p *serverProc) turns(t *testing.T, sessionID string) []ixTurn {
	t.Helper()
	var page struct {
		Turns []ixTurn `json:"turns"`
	}
	p.call(t, http.MethodGet, "/sessions/"+sessionID+"/turns?limit=200", nil, &page)
	return page.Turns
}

func (p *serverProc) waitTurnOutcome(t *testing.T, sessionID, turnID, outcome string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		for _, tr := range p.turns(t, sessionID) {
			if tr.ID == turnID && tr.Phase == "settled" {
				if tr.Outcome != outcome {
					t.Fatalf("turn %s settled %s, want %s; stderr:\n%s", turnID, tr.Outcome, outcome, p.stderr)
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("turn %s never settled; stderr:\n%s", turnID, p.stderr)
		}
	}
}

func agentTextOf(ms []wireMessage, turnID string) string {
	var b strings.Builder
	for _, m := range ms {
		if m.Role == "agent" && (turnID == "" || m.TurnID == turnID) {
			b.WriteString(m.Content.Text)
		}
	}
	return b.String()
}

// Twenty collaborators on separate WebSocket connections answer the same
// approval at once, half with one option and half with the other. One
// answer wins; its copies are answered, the others superseded; the agent
// process receives exactly one answer; every watcher ends with the same
// snapshot naming who answered.
func TestInteractionRaceTwentyCollaborators(t *testing.T) {
	bin := ensembleBinary(t)
	dataDir := t.TempDir()
	p := startServer(t, dataDir, "--agent", bin+" sim-agent --rate 1ms")
	sid := p.createSession(t)

	const n = 20
	clients := make([]*ixClient, n)
	for i := range clients {
		user := fmt.Sprintf("c%02d", i)
		clients[i] = ixDial(t, p.addr, ixToken(t, dataDir, user, "Collaborator "+user))
		clients[i].subscribe(sid)
	}
	tr := p.submit(t, sid, "race-1", "/sim permission")
	var it host.Interaction
	for _, cl := range clients {
		tree, _ := cl.waitTree("one pending approval", onePending)
		if tree.TurnID != tr.ID {
			t.Fatalf("the snapshot names root turn %s, want %s", tree.TurnID, tr.ID)
		}
		it = tree.Interactions[0]
	}

	dispositions := make([]string, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, cl := range clients {
		option := "allow"
		if i%2 == 1 {
			option = "reject"
		}
		wg.Go(func() {
			<-start
			dispositions[i], errs[i] = cl.respond(it, option, nil)
		})
	}
	close(start)
	wg.Wait()

	p.waitTurnOutcome(t, sid, tr.ID, "completed")
	final, raw := clients[0].waitTree("delivered", func(tr ixTree) bool {
		return len(tr.Interactions) == 1 && tr.Interactions[0].Resolution == host.ResolutionDelivered
	})
	won := final.Interactions[0]
	if won.State != host.InteractionAnswered || won.Response == nil || !strings.HasPrefix(won.AnsweredBy, "c") ||
		won.AnsweredByName != "Collaborator "+won.AnsweredBy {
		t.Fatalf("final interaction: %+v", won)
	}
	winner := won.Response.OptionID
	for i := range clients {
		if errs[i] != nil {
			t.Fatalf("collaborator %d got an error for losing a race: %v", i, errs[i])
		}
		option := map[bool]string{true: "allow", false: "reject"}[i%2 == 0]
		want := "superseded"
		if option == winner {
			want = "answered"
		}
		if dispositions[i] != want {
			t.Fatalf("collaborator %d (%s) got %s, want %s (winner %s)", i, option, dispositions[i], want, winner)
		}
	}
	for i, cl := range clients {
		_, got := cl.waitTree("the same final snapshot", func(tr ixTree) bool {
			return len(tr.Interactions) == 1 && tr.Interactions[0].Resolution == host.ResolutionDelivered
		})
		if got != raw {
			t.Fatalf("watcher %d ends with another snapshot:\n%s\n%s", i, got, raw)
		}
	}
	// The agent process logs every answer it receives.
	if got := strings.Count(p.stderr.String(), "sim: permission request answered"); got != 1 {
		t.Fatalf("the agent process received %d answers, want exactly 1; stderr:\n%s", got, p.stderr)
	}
	if text := agentTextOf(p.messages(t, sid), tr.ID); strings.Count(text, "Permission outcome:") != 1 || !strings.Contains(text, "("+winner+")") {
		t.Fatalf("agent text: %q", text)
	}
}

// The server is SIGKILLed after a decline committed but before it reached
// the agent (the /sim deaf agent stopped reading its input). On restart
// the durable operation is recovered first; the new agent process never
// had the request, so the decline is delivered to it once, as the
// follow-up prompt interactive-deny:<operation-id>, and another restart
// does not repeat it.
func TestCrashBeforeDeliveryDeliversOnceAfterRestart(t *testing.T) {
	dataDir := t.TempDir()
	p := startServer(t, dataDir)
	sid := p.createSession(t)
	watch := ixDial(t, p.addr, p.token)
	watch.subscribe(sid)
	tr := p.submit(t, sid, "crash-deny-1", "/sim permission deaf")
	tree, _ := watch.waitTree("one pending approval", onePending)
	it := tree.Interactions[0]
	const note = "Keep config.json exactly as it is."
	if d, err := watch.respond(it, "reject", map[string]any{"message": note}); err != nil || d != "answered" {
		t.Fatalf("respond: %s %v", d, err)
	}
	p.kill()
	<-p.done
	// The agent's state goes with the crash (the sim keeps its sessions in
	// the data dir, as real agents keep theirs on disk): the new agent
	// process never had the request and does not know the session.
	if err := os.RemoveAll(simStateDir(dataDir)); err != nil {
		t.Fatal(err)
	}

	q := startServer(t, dataDir)
	// The restarted embedded agent lost the session: the follow-up waits
	// for the explicit choice to continue in a fresh agent session.
	q.continueFresh(t, sid)
	followID := host.DenyFollowUpPrefix + host.OperationIDFor(host.InteractionRef{
		WorkspaceID: "default", SessionID: it.SessionID, TurnID: it.TurnID, RequestID: it.RequestID})
	var follow ixTurn
	for deadline := time.Now().Add(30 * time.Second); follow.Outcome == ""; time.Sleep(20 * time.Millisecond) {
		for _, x := range q.turns(t, sid) {
			if x.ClientSubmitID == followID && x.Phase == "settled" {
				follow = x
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no follow-up turn %s; turns %+v; stderr:\n%s", followID, q.turns(t, sid), q.stderr)
		}
	}
	if follow.Outcome != "completed" || follow.SubmittedBy != "local" {
		t.Fatalf("follow-up turn: %+v", follow)
	}
	ms := q.messages(t, sid)
	var prompt string
	for _, m := range ms {
		if m.TurnID == follow.ID && m.Role == "user" {
			prompt = m.Content.Text
		}
	}
	if !strings.Contains(prompt, "declined") || !strings.Contains(prompt, note) {
		t.Fatalf("follow-up prompt: %q", prompt)
	}
	if agentTextOf(ms, follow.ID) == "" {
		t.Fatal("the new agent process never answered the follow-up")
	}
	// The answered turn ended with the old process; the interaction says
	// the agent was gone when the answer arrived.
	q.waitTurnOutcome(t, sid, tr.ID, "failed")
	if got := q.turns(t, sid)[0]; got.ID != follow.ID {
		t.Fatalf("the follow-up is the newest turn: %+v", got)
	}

	q.kill()
	<-q.done
	r := startServer(t, dataDir)
	count := 0
	for _, x := range r.turns(t, sid) {
		if x.ClientSubmitID == followID {
			count++
		}
	}
	if count != 1 {
		t.Fatalf("follow-up turns after another restart: %d", count)
	}
	if got := strings.Count(agentTextOf(r.messages(t, sid), ""), "You wrote"); got != 1 {
		t.Fatalf("the agent answered the follow-up %d times", got)
	}
	w3 := ixDial(t, r.addr, r.token)
	w3.subscribe(sid)
	// The tree now belongs to the follow-up turn (no interactions); the
	// declined request itself reads superseded: its agent had gone.
	var got struct {
		Interaction host.Interaction `json:"interaction"`
	}
	f := w3.request("interaction.respond", map[string]any{"workspace": "default", "sessionId": it.SessionID,
		"turnId": it.TurnID, "requestId": it.RequestID, "response": map[string]any{"optionId": "reject", "payload": map[string]any{"message": note}}})
	if !f.OK {
		t.Fatalf("respond after restarts: %+v", f.Error)
	}
	_ = json.Unmarshal(f.Result, &got)
	if got.Interaction.State != host.InteractionSuperseded || got.Interaction.Resolution != host.ResolutionProviderGone ||
		got.Interaction.AnsweredByName != "Local user" {
		t.Fatalf("the declined interaction after restarts: %+v", got.Interaction)
	}
}

// The acp-go-sdk example agent, a real ACP agent process: its permission
// request is shown to a WebSocket watcher with the agent's options and the
// tool call, answered over the WebSocket, and the agent continues with the
// chosen option.
func TestExampleAgentApprovalOverWebSocket(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the ACP SDK example agent")
	}
	agent := filepath.Join(t.TempDir(), "acp-example-agent")
	if out, err := exec.Command("go", "build", "-o", agent, "github.com/coder/acp-go-sdk/example/agent").CombinedOutput(); err != nil {
		t.Fatalf("build the example agent: %v\n%s", err, out)
	}
	p := startServer(t, t.TempDir(), "--agent", agent)
	sid := p.createSession(t)
	cl := ixDial(t, p.addr, p.token)
	cl.subscribe(sid)
	tr := p.submit(t, sid, "example-1", "Hello, agent!")
	tree, _ := cl.waitTree("one pending approval", onePending)
	it := tree.Interactions[0]
	if it.Kind != host.InteractionApproval || it.Title != "Modifying critical configuration file" || len(it.Options) != 2 ||
		it.Options[0].ID != "allow" || it.Options[0].Name != "Allow this change" || it.Tool == nil || it.Tool.Kind != "edit" ||
		!strings.Contains(string(it.Tool.Input), "config.json") || tree.TurnID != tr.ID {
		t.Fatalf("the permission request as shown: %+v tool %+v", it, it.Tool)
	}
	if d, err := cl.respond(it, "allow", nil); err != nil || d != "answered" {
		t.Fatalf("respond: %s %v", d, err)
	}
	p.waitTurnOutcome(t, sid, tr.ID, "completed")
	if text := agentTextOf(p.messages(t, sid), tr.ID); !strings.Contains(text, "successfully updated the configuration") {
		t.Fatalf("the agent did not continue with the chosen option: %q", text)
	}
	cl.waitTree("delivered", func(tr ixTree) bool {
		return len(tr.Interactions) == 1 && tr.Interactions[0].Resolution == host.ResolutionDelivered &&
			tr.Interactions[0].AnsweredBy == "local"
	})
}
