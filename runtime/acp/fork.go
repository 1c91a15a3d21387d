package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/ensemble-dev/ensemble/host"
)

// Fork and live settings (host.Forker, host.SettingsUpdater).
//
// ACP session/fork (unstable) copies a whole provider session, so it can
// only attest a fork through the session's latest settled turn. An agent
// that also advertises Ensemble's through-turn extension
// (_meta["ensemble.dev/forkThroughTurn"], method _ensemble/session/fork,
// implemented by the sim agent) forks through any turn, named by the
// messageId of its session/prompt request, never by position.

const (
	forkThroughTurnMethod = "_ensemble/session/fork"
	forkThroughTurnMeta   = "ensemble.dev/forkThroughTurn"
)

var (
	_ host.Forker          = (*Runtime)(nil)
	_ host.SettingsUpdater = (*Runtime)(nil)
)

func forkMode(caps *acpsdk.AgentCapabilities) (host.ForkMode, string) {
	if caps == nil {
		return host.ForkNone, host.ReasonForkAgentUnknown
	}
	if v, ok := caps.Meta[forkThroughTurnMeta].(bool); ok && v {
		return host.ForkAnyTurn, ""
	}
	if caps.SessionCapabilities.Fork != nil {
		return host.ForkLatestTurn, ""
	}
	return host.ForkNone, host.ReasonForkUnsupported
}

// ForkCapability reads what the agent advertised at its latest
// initialize; before the first connection it is unknown (nothing is
// started just to answer).
func (r *Runtime) ForkCapability() (host.ForkMode, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return forkMode(r.caps)
}

// Fork asks the agent for a new provider session holding the source's
// history through req.ThroughProviderTurnID.
func (r *Runtime) Fork(ctx context.Context, req host.ForkRequest) (host.ForkResult, error) {
	c, err := r.connect(ctx)
	if err != nil {
		return host.ForkResult{}, err
	}
	mode, reason := forkMode(&c.caps)
	if mode == host.ForkNone {
		return host.ForkResult{}, refusedLocally(reason, "the agent does not advertise session fork")
	}
	// Every turn id must be this adapter's correlation id in the source
	// provider session: only then does the new session hold it too.
	prefix := providerTurnID(req.ProviderSessionID, "")
	through, ok := strings.CutPrefix(req.ThroughProviderTurnID, prefix)
	if !ok || through == "" {
		return host.ForkResult{}, refusedLocally(host.ReasonForkProviderMismatch, "the fork point is not a turn of the provider session")
	}
	for _, id := range req.ProviderTurnIDs {
		if !strings.HasPrefix(id, prefix) {
			return host.ForkResult{}, refusedLocally(host.ReasonForkProviderMismatch, "a turn is not in the provider session")
		}
	}
	cwd, err := r.sessionCwd(req.Settings)
	if err != nil {
		return host.ForkResult{}, refusedLocally("invalid_cwd", err.Error())
	}
	var psid string
	switch {
	case mode == host.ForkAnyTurn:
		raw, err := c.cs.CallExtension(ctx, forkThroughTurnMethod, map[string]string{
			"sessionId": req.ProviderSessionID, "throughMessageId": through, "cwd": cwd})
		if err != nil {
			return host.ForkResult{}, forkErr(err)
		}
		var resp struct {
			SessionID string `json:"sessionId"`
		}
		if err := json.Unmarshal(raw, &resp); err != nil || resp.SessionID == "" {
			return host.ForkResult{}, fmt.Errorf("acp: %s: malformed answer", forkThroughTurnMethod)
		}
		psid = resp.SessionID
	case req.Latest:
		if t := c.turnByPSID(req.ProviderSessionID); t != nil && !t.isFinished() {
			// A whole-session fork now would include the running prompt.
			return host.ForkResult{}, refusedLocally(host.ReasonTurnInProgress, "a prompt is running in the provider session")
		}
		resp, err := c.cs.UnstableForkSession(ctx, acpsdk.UnstableForkSessionRequest{
			SessionId: acpsdk.SessionId(req.ProviderSessionID), Cwd: cwd})
		if err != nil {
			return host.ForkResult{}, forkErr(err)
		}
		psid = string(resp.SessionId)
	default:
		return host.ForkResult{}, refusedLocally(host.ReasonForkNotLatest, "session/fork copies the whole session")
	}
	if psid == "" {
		return host.ForkResult{}, fmt.Errorf("acp: fork answered without a session id")
	}
	out := host.ForkResult{ProviderSessionID: psid, TurnIDs: make(map[string]string, len(req.ProviderTurnIDs))}
	for _, id := range req.ProviderTurnIDs {
		out.TurnIDs[id] = providerTurnID(psid, strings.TrimPrefix(id, prefix))
	}
	return out, nil
}

// forkErr: a JSON-RPC error answer is the agent's explicit refusal (no
// session was created); anything else leaves the outcome unknown.
func forkErr(err error) error {
	var re *acpsdk.RequestError
	if errors.As(err, &re) {
		return refusedLocally("fork_refused_by_agent", "the agent refused the fork")
	}
	return fmt.Errorf("acp: fork: %w", err)
}

// UpdateSettings accepts new settings for a live session. ACP cannot move
// a live session to another working directory, but session/load takes
// one: the live binding is dropped so the next Start loads the session
// with the new settings. An agent that cannot load sessions would lose
// the conversation, so the change is refused there.
func (r *Runtime) UpdateSettings(ctx context.Context, ws, sessionID string, settings map[string]string) error {
	key := sessionKey{ws: ws, id: sessionID}
	defer r.keys.lock(key)()
	c := r.current()
	if c == nil {
		return nil
	}
	psid, ok := c.sessionFor(key)
	if !ok {
		return nil // not live here: the persisted settings apply at Start
	}
	if _, err := r.sessionCwd(settings); err != nil {
		return refusedLocally("invalid_cwd", err.Error())
	}
	if t := c.turnByPSID(psid); t != nil && !t.isFinished() {
		return refusedLocally(host.ReasonTurnInProgress, "a prompt is running")
	}
	if !c.caps.LoadSession {
		return refusedLocally("agent_cannot_reload_session", "the agent cannot load the session with new settings")
	}
	c.unbindSession(key)
	return nil
}
