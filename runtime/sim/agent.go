// Package sim is the Ensemble sim agent: an ACP agent that needs no model.
// It streams deterministic answers, tool calls, thoughts and permission
// requests, and injects faults on demand, for demos, tests and load tests.
// It always labels itself as simulated.
//
// It serves ACP over any byte stream: Serve runs it over stdio (the
// `ensemble sim-agent` command), Dial runs it in-process over pipes for
// runtime/acp's Config.Dial.
//
// # Prompt directives
//
// A prompt whose first line starts with "/sim" steers the answer; the rest
// of the prompt is the user's text. Directives combine, for example
// "/sim words=200 rate=5ms tool".
//
//	/sim words=N         stream a long answer of N words
//	/sim rate=20ms       delay between chunks (default Options.Rate, 15ms)
//	/sim instant         no delays at all (load tests)
//	/sim think           stream thought chunks before the answer
//	/sim tool            a tool call (pending → in_progress → completed
//	                     with output) between two halves of the text
//	/sim permission      ask session/request_permission and say in the
//	                     text which option was selected, or that it was
//	                     cancelled
//	/sim question        ask a question with two answers
//	/sim plan            propose a plan and ask whether to go ahead
//	/sim subagent        run a sub-agent in its own provider session
//	                     (announced by a tool call's _meta.ensemble.subagent)
//	/sim … deaf          stop reading input after this prompt (fault)
//	/sim fail            answer the prompt with a JSON-RPC error at once
//	                     (an explicit rejection, nothing streamed)
//	/sim error-after=N   stream N words, then answer with a JSON-RPC error
//	/sim hang            stream one line, then wait until cancelled
//	/sim crash           stream one line, then drop the connection
//	                     (in-process: close the pipes; stdio: exit 3)
//	/sim stamp           append "@<unix nanoseconds>" (the wall-clock time
//	                     the chunk is sent) to every answer chunk, so a load
//	                     test can measure agent-to-watcher latency
//
// Unknown directives are named in the answer and otherwise ignored.
// Without a /sim line the agent gives its default reply, or runs
// Options.Scenario when one is set (see Scenario for the file format).
//
// session/cancel stops streaming promptly; the prompt then ends with stop
// reason "cancelled". Sessions live in memory for the life of the agent
// (process) and, with Options.StateDir, in one file each in that directory,
// so that — like real ACP agents — the sim loads them after a restart;
// session/load replays a session's history and fails for an unknown id.
package sim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/coder/acp-go-sdk"
)

// Name is the agent's name for display.
const Name = "Ensemble sim agent"

// Options tune the sim agent.
type Options struct {
	// Rate is the delay between streamed chunks. Default 15ms; negative: none.
	Rate time.Duration
	// ChunkWords is the number of words per chunk. Default 1.
	ChunkWords int
	// Scenario, when set, replaces the default reply of prompts without a
	// /sim line.
	Scenario Scenario
	// Logger receives diagnostics. Default: slog.Default().
	Logger *slog.Logger
	// Crash is what "/sim crash" does. Dial sets it to drop the pipes; nil
	// exits the process with status 3.
	Crash func()
	// StateDir, when set, makes sessions durable: each is kept in a file
	// in this directory (created on demand), written when the session is
	// created and after each exchange, and session/load finds it after the
	// agent restarts. Empty: sessions live in memory only.
	StateDir string
	// Fork chooses what fork support the agent advertises (fork.go):
	// ForkThroughTurn (default) both ACP session/fork and the
	// through-turn extension, ForkWholeSession only session/fork, ForkOff
	// neither.
	Fork ForkSupport
}

func (o Options) withDefaults() Options {
	if o.Rate == 0 {
		o.Rate = 15 * time.Millisecond
	}
	if o.ChunkWords <= 0 {
		o.ChunkWords = 1
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// agent implements acp.Agent and acp.AgentLoader.
type agent struct {
	opts Options
	base context.Context // ends every prompt when the agent stops

	connReady chan struct{}
	conn      *acp.AgentSideConnection

	mu       sync.Mutex
	sessions map[string]*session
}

// session is one conversation the agent remembers.
type session struct {
	mu      sync.Mutex
	cwd     string
	history []exchange
	cancel  context.CancelFunc // of the running prompt
	// steer is signalled when the client has steering waiting (steer.go).
	steer chan struct{}
}

// exchange is one prompt and the text answered, for session/load replay;
// id is the prompt's ACP messageId (fork through a turn names it).
type exchange struct{ id, user, agent string }

var (
	_ acp.Agent       = (*agent)(nil)
	_ acp.AgentLoader = (*agent)(nil)
)

func newAgent(base context.Context, opts Options) *agent {
	return &agent{opts: opts, base: base, connReady: make(chan struct{}), sessions: make(map[string]*session)}
}

// setConn completes construction: the SDK needs the agent before the
// connection exists, and handlers may run as soon as it does.
func (a *agent) setConn(c *acp.AgentSideConnection) {
	a.conn = c
	close(a.connReady)
}

func (a *agent) peer() *acp.AgentSideConnection {
	<-a.connReady
	return a.conn
}

func (a *agent) Initialize(context.Context, acp.InitializeRequest) (acp.InitializeResponse, error) {
	return acp.InitializeResponse{
		ProtocolVersion: acp.ProtocolVersionNumber,
		AgentCapabilities: acp.AgentCapabilities{
			LoadSession:         true,
			SessionCapabilities: acp.SessionCapabilities{Close: &acp.SessionCloseCapabilities{}, Fork: a.forkCapability()},
			Meta:                a.capabilityMeta(),
		},
		AgentInfo: &acp.Implementation{
			Name:    Name,
			Title:   acp.Ptr(Name + " (simulated — no AI model)"),
			Version: "1",
		},
		AuthMethods: []acp.AuthMethod{},
	}, nil
}

func (a *agent) Authenticate(context.Context, acp.AuthenticateRequest) (acp.AuthenticateResponse, error) {
	return acp.AuthenticateResponse{}, nil
}

func (a *agent) Logout(context.Context, acp.LogoutRequest) (acp.LogoutResponse, error) {
	return acp.LogoutResponse{}, acp.NewMethodNotFound(acp.AgentMethodLogout)
}

func (a *agent) NewSession(_ context.Context, p acp.NewSessionRequest) (acp.NewSessionResponse, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := "sim-" + hex.EncodeToString(b[:])
	s := &session{cwd: p.Cwd, steer: make(chan struct{}, 1)}
	s.mu.Lock()
	err := a.saveSession(id, s)
	s.mu.Unlock()
	if err != nil {
		a.opts.Logger.Error("sim: cannot store the new session", "session", id, "err", err)
		return acp.NewSessionResponse{}, simError("cannot store the session: " + err.Error())
	}
	a.mu.Lock()
	a.sessions[id] = s
	a.mu.Unlock()
	return acp.NewSessionResponse{SessionId: acp.SessionId(id)}, nil
}

// LoadSession replays the session's history, as ACP agents do, before
// answering.
func (a *agent) LoadSession(ctx context.Context, p acp.LoadSessionRequest) (acp.LoadSessionResponse, error) {
	s, err := a.stored(string(p.SessionId))
	if err != nil {
		a.opts.Logger.Error("sim: cannot read a stored session", "session", p.SessionId, "err", err)
		return acp.LoadSessionResponse{}, simError("cannot read the stored session: " + err.Error())
	}
	if s == nil {
		return acp.LoadSessionResponse{}, &acp.RequestError{Code: -32002, Message: "Resource not found", Data: map[string]any{"sessionId": p.SessionId}}
	}
	s.mu.Lock()
	history := append([]exchange(nil), s.history...)
	s.mu.Unlock()
	for _, ex := range history {
		for _, u := range []acp.SessionUpdate{acp.UpdateUserMessageText(ex.user), acp.UpdateAgentMessageText(ex.agent)} {
			if err := a.peer().SessionUpdate(ctx, acp.SessionNotification{SessionId: p.SessionId, Update: u}); err != nil {
				return acp.LoadSessionResponse{}, err
			}
		}
	}
	return acp.LoadSessionResponse{}, nil
}

// CloseSession stops the session's running prompt, as ACP requires, but
// keeps the session loadable for the life of the agent.
func (a *agent) CloseSession(_ context.Context, p acp.CloseSessionRequest) (acp.CloseSessionResponse, error) {
	s := a.session(string(p.SessionId))
	if s == nil {
		return acp.CloseSessionResponse{}, &acp.RequestError{Code: -32002, Message: "Resource not found"}
	}
	s.mu.Lock()
	if s.cancel != nil {
		s.cancel()
	}
	s.mu.Unlock()
	return acp.CloseSessionResponse{}, nil
}

// Cancel: the SDK already cancelled the prompt's context for this session.
func (a *agent) Cancel(context.Context, acp.CancelNotification) error { return nil }

func (a *agent) ListSessions(context.Context, acp.ListSessionsRequest) (acp.ListSessionsResponse, error) {
	return acp.ListSessionsResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionList)
}

func (a *agent) ResumeSession(context.Context, acp.ResumeSessionRequest) (acp.ResumeSessionResponse, error) {
	return acp.ResumeSessionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionResume)
}

func (a *agent) SetSessionConfigOption(context.Context, acp.SetSessionConfigOptionRequest) (acp.SetSessionConfigOptionResponse, error) {
	return acp.SetSessionConfigOptionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionSetConfigOption)
}

// SetSessionMode accepts any mode; the sim behaves the same in all.
func (a *agent) SetSessionMode(_ context.Context, p acp.SetSessionModeRequest) (acp.SetSessionModeResponse, error) {
	if a.session(string(p.SessionId)) == nil {
		return acp.SetSessionModeResponse{}, &acp.RequestError{Code: -32002, Message: "Resource not found"}
	}
	return acp.SetSessionModeResponse{}, nil
}

func (a *agent) session(id string) *session {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sessions[id]
}

// stored is the session id as this agent knows it, or as the state
// directory keeps it from an earlier run (nil, nil: unknown).
func (a *agent) stored(id string) (*session, error) {
	if s := a.session(id); s != nil {
		return s, nil
	}
	s, err := a.loadSession(id)
	if s == nil || err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if known := a.sessions[id]; known != nil { // loaded meanwhile
		return known, nil
	}
	a.sessions[id] = s
	return s, nil
}

// Prompt answers one prompt by running its script.
func (a *agent) Prompt(ctx context.Context, p acp.PromptRequest) (acp.PromptResponse, error) {
	s := a.session(string(p.SessionId))
	if s == nil {
		return acp.PromptResponse{}, &acp.RequestError{Code: -32002, Message: "Resource not found", Data: map[string]any{"sessionId": p.SessionId}}
	}
	// The SDK cancels ctx on session/cancel; base ends it when the agent stops.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(a.base, cancel)
	defer stop()

	text := promptText(p.Prompt)
	s.mu.Lock()
	first := len(s.history) == 0
	// The history as it is now: later prompts only append to it. Only
	// "/sim recall" renders it (rendering every prompt grew with the
	// session's length).
	history := s.history[:len(s.history):len(s.history)]
	s.cancel = cancel
	s.mu.Unlock()

	r := &run{a: a, ctx: ctx, sid: p.SessionId, rate: a.opts.Rate, chunk: a.opts.ChunkWords}
	var steps []Step
	if d, rest, ok := parseDirectives(text); ok {
		if d.rate != 0 {
			r.rate = d.rate
		}
		r.errorAfter = d.errorAfter
		r.stamp = d.stamp
		steps = d.script(rest, first)
		if d.recall {
			steps = []Step{{Text: recallText(history)}}
		}
	} else if len(a.opts.Scenario) > 0 {
		steps = a.opts.Scenario
	} else {
		steps = directives{}.script(text, first)
	}

	err := r.steps(steps)

	s.mu.Lock()
	s.history = append(s.history, exchange{id: msgID(p.MessageId), user: text, agent: r.said.String()})
	s.cancel = nil
	if serr := a.saveSession(string(p.SessionId), s); serr != nil {
		a.opts.Logger.Error("sim: cannot store the session", "session", p.SessionId, "err", serr)
	}
	s.mu.Unlock()

	switch {
	case err == nil:
		return acp.PromptResponse{StopReason: acp.StopReasonEndTurn, UserMessageId: p.MessageId}, nil
	case ctx.Err() != nil && a.base.Err() == nil:
		return acp.PromptResponse{StopReason: acp.StopReasonCancelled, UserMessageId: p.MessageId}, nil
	}
	return acp.PromptResponse{}, err
}

func promptText(blocks []acp.ContentBlock) string {
	var parts []string
	for _, b := range blocks {
		if b.Text != nil {
			parts = append(parts, b.Text.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// simError is the JSON-RPC error of /sim fail and friends.
func simError(msg string) error {
	return &acp.RequestError{Code: -32603, Message: "Internal error", Data: map[string]any{"details": msg, "simulated": true}}
}
