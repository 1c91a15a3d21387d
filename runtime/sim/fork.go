package sim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/coder/acp-go-sdk"
)

// Session fork. ACP's (unstable) session/fork copies a whole session; the
// sim also offers an extension that forks through one exchange, named by
// the messageId of its session/prompt request, so that forking at an
// earlier turn is testable end to end. It advertises the extension in its
// initialize capabilities under _meta[ForkThroughTurnMeta].

// ForkSupport selects the fork support the sim advertises.
type ForkSupport int

const (
	ForkThroughTurn  ForkSupport = iota // session/fork and the through-turn extension
	ForkWholeSession                    // only ACP session/fork
	ForkOff                             // no fork
)

// ForkThroughTurnMethod is the extension method; ForkThroughTurnMeta the
// capability key that advertises it.
const (
	ForkThroughTurnMethod = "_ensemble/session/fork"
	ForkThroughTurnMeta   = "ensemble.dev/forkThroughTurn"
)

// ForkThroughTurnRequest forks SessionID through the exchange whose prompt
// had messageId ThroughMessageID.
type ForkThroughTurnRequest struct {
	SessionID        string `json:"sessionId"`
	ThroughMessageID string `json:"throughMessageId"`
	Cwd              string `json:"cwd"`
}

// ForkThroughTurnResponse names the new session.
type ForkThroughTurnResponse struct {
	SessionID string `json:"sessionId"`
}

func (a *agent) forkCapability() *acp.SessionForkCapabilities {
	if a.opts.Fork == ForkOff {
		return nil
	}
	return &acp.SessionForkCapabilities{}
}

func (a *agent) forkMeta() map[string]any {
	if a.opts.Fork != ForkThroughTurn {
		return nil
	}
	return map[string]any{ForkThroughTurnMeta: true}
}

func msgID(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// UnstableForkSession implements ACP session/fork: the whole history.
func (a *agent) UnstableForkSession(_ context.Context, p acp.UnstableForkSessionRequest) (acp.UnstableForkSessionResponse, error) {
	if a.opts.Fork == ForkOff {
		return acp.UnstableForkSessionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionFork)
	}
	id, err := a.fork(string(p.SessionId), "", p.Cwd)
	if err != nil {
		return acp.UnstableForkSessionResponse{}, err
	}
	return acp.UnstableForkSessionResponse{SessionId: acp.SessionId(id)}, nil
}

// forkThroughTurn serves the through-turn fork extension.
func (a *agent) forkThroughTurn(method string, params json.RawMessage) (any, error) {
	if a.opts.Fork != ForkThroughTurn {
		return nil, acp.NewMethodNotFound(method)
	}
	var p ForkThroughTurnRequest
	if err := json.Unmarshal(params, &p); err != nil || p.SessionID == "" || p.ThroughMessageID == "" {
		return nil, acp.NewInvalidParams(map[string]any{"error": "sessionId and throughMessageId are required"})
	}
	id, err := a.fork(p.SessionID, p.ThroughMessageID, p.Cwd)
	if err != nil {
		return nil, err
	}
	return ForkThroughTurnResponse{SessionID: id}, nil
}

// fork copies the source's history (through the exchange with messageId
// through, or all of it) into a new stored session.
func (a *agent) fork(source, through, cwd string) (string, error) {
	src, err := a.stored(source)
	if err != nil {
		return "", simError("cannot read the stored session: " + err.Error())
	}
	if src == nil {
		return "", &acp.RequestError{Code: -32002, Message: "Resource not found", Data: map[string]any{"sessionId": source}}
	}
	src.mu.Lock()
	history := append([]exchange(nil), src.history...)
	if cwd == "" {
		cwd = src.cwd
	}
	src.mu.Unlock()
	if through != "" {
		n, matches := -1, 0
		for i, ex := range history {
			if ex.id == through {
				n, matches = i, matches+1
			}
		}
		if matches != 1 {
			// Never guess a turn: an unknown or ambiguous messageId is not found.
			return "", &acp.RequestError{Code: -32002, Message: "Resource not found", Data: map[string]any{"messageId": through}}
		}
		history = history[:n+1]
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := "sim-" + hex.EncodeToString(b[:])
	s := &session{cwd: cwd, history: history}
	s.mu.Lock()
	err = a.saveSession(id, s)
	s.mu.Unlock()
	if err != nil {
		return "", simError("cannot store the session: " + err.Error())
	}
	a.mu.Lock()
	a.sessions[id] = s
	a.mu.Unlock()
	return id, nil
}

// recallText is the answer of "/sim recall": the user prompts this
// session's history holds, oldest first, so a test can see exactly what a
// forked session remembers.
func recallText(history []exchange) string {
	var b strings.Builder
	fmt.Fprintf(&b, "I remember %d earlier prompts.", len(history))
	for i, ex := range history {
		fmt.Fprintf(&b, " [%d] %s", i+1, ex.user)
	}
	return b.String()
}
