package sim

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/coder/acp-go-sdk"
)

// Steering: Ensemble's ACP extension for user input into a running turn
// (ACP has no standard one). The agent advertises it in its initialize
// answer (agentCapabilities._meta.ensemble.steering = true). The client
// sends the notification SteeringReadyMethod when input waits; the agent
// takes it with the request SteeringPullMethod at its next pull point (the
// pause between answer chunks, or while it waits in /sim hang) and answers
// it in the running turn. The pull is the cut: what it returns is
// delivered, and the client no longer lets anyone retract it.
const (
	SteeringReadyMethod = "_ensemble/steering_ready"
	SteeringPullMethod  = "_ensemble/steering_pull"
)

// SteeringParams is the params of both methods.
type SteeringParams struct {
	SessionID string `json:"sessionId"`
}

// SteeringPullResult is the pull's answer: the messages, oldest first.
type SteeringPullResult struct {
	Messages []SteeringPulled `json:"messages"`
}

// SteeringPulled is one message taken into the turn.
type SteeringPulled struct {
	EntryID string             `json:"entryId"`
	Author  string             `json:"author,omitempty"`
	Prompt  []acp.ContentBlock `json:"prompt"`
}

// steeringCaps is the capability advertisement.
func steeringCaps() map[string]any {
	return map[string]any{"ensemble": map[string]any{"steering": true}}
}

// steeringReady takes the steering notice: the session's running prompt
// pulls at its next pull point.
func (a *agent) steeringReady(params json.RawMessage) (any, error) {
	var p SteeringParams
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, acp.NewInvalidParams(map[string]any{"error": err.Error()})
	}
	if s := a.session(p.SessionID); s != nil {
		select {
		case s.steer <- struct{}{}:
		default: // already signalled
		}
	}
	return nil, nil
}

// steerSignal is the session's steering notice channel.
func (r *run) steerSignal() <-chan struct{} {
	if s := r.a.session(string(r.sid)); s != nil {
		return s.steer
	}
	return nil
}

// pullSteering takes the waiting steering from the client and answers
// each message in the running turn.
func (r *run) pullSteering() error {
	raw, err := r.a.peer().CallExtension(r.ctx, SteeringPullMethod, SteeringParams{SessionID: string(r.sid)})
	if err != nil {
		return err
	}
	var res SteeringPullResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("sim: steering pull answer: %w", err)
	}
	for _, m := range res.Messages {
		text := strings.TrimSpace(promptText(m.Prompt))
		who := m.Author
		if who == "" {
			who = "a collaborator"
		}
		part := fmt.Sprintf(" [Steering from %s: %q — taking it into account.]", who, text)
		if err := r.send(acp.UpdateAgentMessageText(part)); err != nil {
			return err
		}
		r.said.WriteString(part)
	}
	return nil
}
