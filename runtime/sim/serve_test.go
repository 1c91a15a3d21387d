package sim_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/ensemble-dev/ensemble/runtime/internal/gate"
	"github.com/ensemble-dev/ensemble/runtime/sim"
)

const wait = 10 * time.Second

// client is a recording ACP client.
type client struct {
	mu      sync.Mutex
	updates []acp.SessionNotification
	// allow selects the "allow" option; otherwise permission is cancelled.
	allow bool
	asked []acp.RequestPermissionRequest
}

func (c *client) SessionUpdate(_ context.Context, n acp.SessionNotification) error {
	c.mu.Lock()
	c.updates = append(c.updates, n)
	c.mu.Unlock()
	return nil
}

func (c *client) RequestPermission(_ context.Context, p acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	c.mu.Lock()
	c.asked = append(c.asked, p)
	c.mu.Unlock()
	if c.allow {
		return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{Selected: &acp.RequestPermissionOutcomeSelected{OptionId: "allow"}}}, nil
	}
	return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{Cancelled: &acp.RequestPermissionOutcomeCancelled{}}}, nil
}

func (c *client) ReadTextFile(context.Context, acp.ReadTextFileRequest) (acp.ReadTextFileResponse, error) {
	return acp.ReadTextFileResponse{}, acp.NewMethodNotFound("fs/read_text_file")
}
func (c *client) WriteTextFile(context.Context, acp.WriteTextFileRequest) (acp.WriteTextFileResponse, error) {
	return acp.WriteTextFileResponse{}, acp.NewMethodNotFound("fs/write_text_file")
}
func (c *client) CreateTerminal(context.Context, acp.CreateTerminalRequest) (acp.CreateTerminalResponse, error) {
	return acp.CreateTerminalResponse{}, acp.NewMethodNotFound("terminal/create")
}
func (c *client) KillTerminal(context.Context, acp.KillTerminalRequest) (acp.KillTerminalResponse, error) {
	return acp.KillTerminalResponse{}, acp.NewMethodNotFound("terminal/kill")
}
func (c *client) TerminalOutput(context.Context, acp.TerminalOutputRequest) (acp.TerminalOutputResponse, error) {
	return acp.TerminalOutputResponse{}, acp.NewMethodNotFound("terminal/output")
}
func (c *client) ReleaseTerminal(context.Context, acp.ReleaseTerminalRequest) (acp.ReleaseTerminalResponse, error) {
	return acp.ReleaseTerminalResponse{}, acp.NewMethodNotFound("terminal/release")
}
func (c *client) WaitForTerminalExit(context.Context, acp.WaitForTerminalExitRequest) (acp.WaitForTerminalExitResponse, error) {
	return acp.WaitForTerminalExitResponse{}, acp.NewMethodNotFound("terminal/wait_for_exit")
}

// take returns and clears the recorded updates.
func (c *client) take() []acp.SessionUpdate {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []acp.SessionUpdate
	for _, n := range c.updates {
		out = append(out, n.Update)
	}
	c.updates = nil
	return out
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// served is a sim agent behind real OS pipes, as `ensemble sim-agent` is
// behind stdio.
type served struct {
	conn   *acp.ClientSideConnection
	client *client
	done   chan error
	toAg   *os.File // client's write end; closing it hangs up
}

func serve(t *testing.T, ctx context.Context, opts sim.Options, cl *client) *served {
	t.Helper()
	agIn, toAg, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fromAg, agOut, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	s := &served{client: cl, done: make(chan error, 1), toAg: toAg}
	go func() { s.done <- sim.Serve(ctx, agIn, agOut, opts) }()
	input := gate.New(fromAg)
	s.conn = acp.NewClientSideConnection(cl, toAg, input)
	s.conn.SetLogger(quiet())
	input.Open()
	t.Cleanup(func() {
		toAg.Close()
		select {
		case <-s.done:
		case <-time.After(wait):
			t.Error("Serve did not return after the client hung up")
		}
		agOut.Close()
		agIn.Close()
		fromAg.Close()
	})
	if _, err := s.conn.Initialize(context.Background(), acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	return s
}

func (s *served) newSession(t *testing.T) acp.SessionId {
	t.Helper()
	resp, err := s.conn.NewSession(context.Background(), acp.NewSessionRequest{Cwd: t.TempDir(), McpServers: []acp.McpServer{}})
	if err != nil {
		t.Fatalf("session/new: %v", err)
	}
	return resp.SessionId
}

func (s *served) prompt(sid acp.SessionId, text string) (acp.PromptResponse, error) {
	return s.conn.Prompt(context.Background(), acp.PromptRequest{SessionId: sid, Prompt: []acp.ContentBlock{acp.TextBlock(text)}})
}

func agentText(us []acp.SessionUpdate) (text string, chunks int) {
	for _, u := range us {
		if u.AgentMessageChunk != nil && u.AgentMessageChunk.Content.Text != nil {
			text += u.AgentMessageChunk.Content.Text.Text
			chunks++
		}
	}
	return text, chunks
}

func TestInitializeLabelsSimulated(t *testing.T) {
	agIn, toAg, _ := os.Pipe()
	fromAg, agOut, _ := os.Pipe()
	defer func() { toAg.Close(); agIn.Close(); fromAg.Close(); agOut.Close() }()
	done := make(chan error, 1)
	go func() { done <- sim.Serve(context.Background(), agIn, agOut, sim.Options{Logger: quiet()}) }()
	input := gate.New(fromAg)
	conn := acp.NewClientSideConnection(&client{}, toAg, input)
	conn.SetLogger(quiet())
	input.Open()
	resp, err := conn.Initialize(context.Background(), acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.AgentCapabilities.LoadSession || resp.AgentInfo == nil || resp.AgentInfo.Name != sim.Name ||
		resp.AgentInfo.Title == nil || !strings.Contains(*resp.AgentInfo.Title, "simulated") {
		t.Fatalf("initialize = %+v / %+v", resp, resp.AgentInfo)
	}
	toAg.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve after hang-up = %v, want nil", err)
		}
	case <-time.After(wait):
		t.Fatal("Serve did not return after hang-up")
	}
}

func TestDefaultReplyIsDeterministicAndStreamed(t *testing.T) {
	s := serve(t, context.Background(), sim.Options{Rate: -1}, &client{})
	var answers []string
	for range 2 {
		sid := s.newSession(t)
		resp, err := s.prompt(sid, "Please refactor the parser")
		if err != nil || resp.StopReason != acp.StopReasonEndTurn {
			t.Fatalf("prompt = %+v, %v", resp, err)
		}
		text, chunks := agentText(s.client.take())
		if chunks != len(strings.Fields(text)) {
			t.Errorf("%d chunks for %d words: not word by word", chunks, len(strings.Fields(text)))
		}
		answers = append(answers, text)
	}
	if answers[0] != answers[1] {
		t.Errorf("replies differ:\n%q\n%q", answers[0], answers[1])
	}
	if !strings.Contains(answers[0], "simulated") || !strings.Contains(answers[0], "“Please refactor the parser”") {
		t.Errorf("reply = %q", answers[0])
	}
}

func TestChunkWords(t *testing.T) {
	s := serve(t, context.Background(), sim.Options{Rate: -1, ChunkWords: 5}, &client{})
	sid := s.newSession(t)
	if _, err := s.prompt(sid, "/sim words=23"); err != nil {
		t.Fatal(err)
	}
	text, chunks := agentText(s.client.take())
	if n := len(strings.Fields(text)); n != 23 || chunks != 5 {
		t.Fatalf("%d words in %d chunks, want 23 in 5: %q", n, chunks, text)
	}
}

func TestPermissionOutcomeIsReported(t *testing.T) {
	for _, allow := range []bool{true, false} {
		s := serve(t, context.Background(), sim.Options{Rate: -1}, &client{allow: allow})
		sid := s.newSession(t)
		if _, err := s.prompt(sid, "/sim permission\nchange the config"); err != nil {
			t.Fatal(err)
		}
		us := s.client.take()
		text, _ := agentText(us)
		var finalStatus acp.ToolCallStatus
		for _, u := range us {
			if u.ToolCallUpdate != nil && u.ToolCallUpdate.Status != nil {
				finalStatus = *u.ToolCallUpdate.Status
			}
		}
		if len(s.client.asked) != 1 || len(s.client.asked[0].Options) != 2 {
			t.Fatalf("asked = %+v", s.client.asked)
		}
		want, wantStatus := "Permission outcome: cancelled", acp.ToolCallStatusFailed
		if allow {
			want, wantStatus = `Permission outcome: selected "Allow this change" (allow)`, acp.ToolCallStatusCompleted
		}
		if !strings.Contains(text, want) || finalStatus != wantStatus {
			t.Errorf("allow=%v: text %q, tool status %s", allow, text, finalStatus)
		}
	}
}

func TestFailAndErrorAfter(t *testing.T) {
	s := serve(t, context.Background(), sim.Options{Rate: -1}, &client{})
	sid := s.newSession(t)
	_, err := s.prompt(sid, "/sim fail")
	var re *acp.RequestError
	if !errors.As(err, &re) {
		t.Fatalf("fail = %v, want a JSON-RPC error", err)
	}
	if us := s.client.take(); len(us) != 0 {
		t.Errorf("fail streamed %d updates", len(us))
	}
	_, err = s.prompt(sid, "/sim words=40 error-after=7")
	if !errors.As(err, &re) {
		t.Fatalf("error-after = %v, want a JSON-RPC error", err)
	}
	if text, _ := agentText(s.client.take()); len(strings.Fields(text)) != 7 {
		t.Errorf("error-after streamed %q", text)
	}
}

func TestCancelStopsHang(t *testing.T) {
	s := serve(t, context.Background(), sim.Options{}, &client{})
	sid := s.newSession(t)
	type result struct {
		resp acp.PromptResponse
		err  error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := s.prompt(sid, "/sim hang")
		res <- result{resp, err}
	}()
	// Cancel once the agent is visibly hanging.
	deadline := time.Now().Add(wait)
	for {
		s.client.mu.Lock()
		n := len(s.client.updates)
		s.client.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no output from /sim hang")
		}
		time.Sleep(time.Millisecond)
	}
	if err := s.conn.Cancel(context.Background(), acp.CancelNotification{SessionId: sid}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-res:
		if r.err != nil || r.resp.StopReason != acp.StopReasonCancelled {
			t.Fatalf("prompt after cancel = %+v, %v", r.resp, r.err)
		}
	case <-time.After(wait):
		t.Fatal("hang did not stop on session/cancel")
	}
}

func TestLoadReplaysHistory(t *testing.T) {
	s := serve(t, context.Background(), sim.Options{Rate: -1}, &client{})
	_, err := s.conn.LoadSession(context.Background(), acp.LoadSessionRequest{SessionId: "sim-nope", Cwd: t.TempDir(), McpServers: []acp.McpServer{}})
	if err == nil {
		t.Fatal("load of an unknown session succeeded")
	}
	sid := s.newSession(t)
	if _, err := s.prompt(sid, "first question"); err != nil {
		t.Fatal(err)
	}
	answer, _ := agentText(s.client.take())
	if _, err := s.conn.LoadSession(context.Background(), acp.LoadSessionRequest{SessionId: sid, Cwd: t.TempDir(), McpServers: []acp.McpServer{}}); err != nil {
		t.Fatalf("load: %v", err)
	}
	us := s.client.take()
	if len(us) != 2 || us[0].UserMessageChunk == nil || us[0].UserMessageChunk.Content.Text.Text != "first question" {
		t.Fatalf("replay = %+v", us)
	}
	if replayed, _ := agentText(us[1:]); replayed != answer {
		t.Errorf("replayed answer %q, want %q", replayed, answer)
	}
}

func TestScenarioReplacesDefaultReply(t *testing.T) {
	sc, err := sim.ParseScenario([]byte(`[
		{"thought": "planning"},
		{"text": "Looking at it."},
		{"tool": {"title": "Run tests", "kind": "execute", "input": {"cmd": "go test"}, "output": "ok"}},
		{"sleep": "1ms"},
		{"text": " All green."}
	]`))
	if err != nil {
		t.Fatal(err)
	}
	s := serve(t, context.Background(), sim.Options{Rate: -1, Scenario: sc}, &client{})
	sid := s.newSession(t)
	if _, err := s.prompt(sid, "anything"); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, u := range s.client.take() {
		switch {
		case u.AgentThoughtChunk != nil:
			kinds = append(kinds, "thought")
		case u.AgentMessageChunk != nil:
			if len(kinds) == 0 || kinds[len(kinds)-1] != "text" {
				kinds = append(kinds, "text")
			}
		case u.ToolCall != nil:
			kinds = append(kinds, "tool:"+string(u.ToolCall.Kind)+":"+string(u.ToolCall.Status))
		case u.ToolCallUpdate != nil:
			kinds = append(kinds, "update:"+string(*u.ToolCallUpdate.Status))
		}
	}
	want := "thought text tool:execute:pending update:in_progress update:completed text"
	if got := strings.Join(kinds, " "); got != want {
		t.Errorf("scenario updates = %s, want %s", got, want)
	}
	// A /sim line still wins over the scenario.
	if _, err := s.prompt(sid, "/sim words=3"); err != nil {
		t.Fatal(err)
	}
	if text, _ := agentText(s.client.take()); len(strings.Fields(text)) != 3 {
		t.Errorf("directive answer = %q", text)
	}
}

func TestCrashCallsHook(t *testing.T) {
	crashed := make(chan struct{})
	var once sync.Once
	s := serve(t, context.Background(), sim.Options{Rate: -1, Crash: func() { once.Do(func() { close(crashed) }) }}, &client{})
	sid := s.newSession(t)
	_, err := s.prompt(sid, "/sim crash")
	select {
	case <-crashed:
	default:
		t.Fatalf("crash hook not called (prompt err %v)", err)
	}
	if err == nil {
		t.Error("crashed prompt reported success")
	}
}

func TestServeStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s := serve(t, ctx, sim.Options{}, &client{})
	sid := s.newSession(t)
	res := make(chan error, 1)
	go func() {
		_, err := s.prompt(sid, "/sim hang")
		res <- err
	}()
	cancel()
	select {
	case err := <-s.done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Serve = %v, want context.Canceled", err)
		}
		s.done <- err // for the cleanup
	case <-time.After(wait):
		t.Fatal("Serve ignored ctx")
	}
	select {
	case err := <-res:
		if err == nil {
			t.Error("hanging prompt ended without error when the agent stopped")
		}
	case <-time.After(wait):
		t.Fatal("hanging prompt still running after Serve stopped")
	}
}

func TestParseScenarioRejectsBadSteps(t *testing.T) {
	for _, bad := range []string{
		`[]`,
		`{"text": "not a list"}`,
		`[{"text": "a", "fail": "b"}]`,
		`[{}]`,
		`[{"sleep": "soon"}]`,
		`[{"tool": {"output": "no title"}}]`,
	} {
		if _, err := sim.ParseScenario([]byte(bad)); err == nil {
			t.Errorf("ParseScenario(%s) accepted", bad)
		}
	}
	path := t.TempDir() + "/scenario.json"
	if err := os.WriteFile(path, []byte(`[{"text": "hi"}, {"crash": true}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	sc, err := sim.LoadScenario(path)
	if err != nil || len(sc) != 2 || sc[0].Text != "hi" || !sc[1].Crash {
		t.Fatalf("LoadScenario = %+v, %v", sc, err)
	}
}
