package acp

import (
	"context"
	"encoding/json"
	"fmt"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/ensemble-dev/ensemble/host"
)

// Steering over Ensemble's ACP extension (ACP has no standard mid-turn
// input). An agent that advertises agentCapabilities._meta.ensemble.steering
// gets the notification steeringReady when input waits for its running
// prompt and takes it with the request steeringPull at its next pull point;
// the client answers the pull from the Turn's sink (host.SteeringSource),
// whose commit is the pull cut. runtime/sim implements the agent side.
const (
	steeringReady = "_ensemble/steering_ready"
	steeringPull  = "_ensemble/steering_pull"
)

var (
	_ host.SteeringRuntime          = (*Runtime)(nil)
	_ acpsdk.ExtensionMethodHandler = (*client)(nil)
)

type steeringParams struct {
	SessionID string `json:"sessionId"`
}

type steeringPulled struct {
	EntryID string                `json:"entryId"`
	Author  string                `json:"author,omitempty"`
	Prompt  []acpsdk.ContentBlock `json:"prompt"`
}

// clientCaps tells the agent this client answers steering pulls.
func clientCaps() acpsdk.ClientCapabilities {
	return acpsdk.ClientCapabilities{Meta: map[string]any{"ensemble": map[string]any{"steering": true}}}
}

// canSteer reads the agent's advertisement.
func canSteer(caps acpsdk.AgentCapabilities) bool {
	ens, _ := caps.Meta["ensemble"].(map[string]any)
	v, _ := ens["steering"].(bool)
	return v
}

// SupportsSteering reports whether the live agent advertised steering.
// Without a live connection nothing runs, so nothing can be steered.
func (r *Runtime) SupportsSteering(string, string) bool {
	c := r.current()
	return c != nil && canSteer(c.caps)
}

// SteeringReady notifies the agent running ref that steering waits.
func (r *Runtime) SteeringReady(ctx context.Context, ref host.TurnRef) error {
	c := r.current()
	if c == nil {
		return fmt.Errorf("acp: steering notice: no live agent connection")
	}
	t := c.turnByRef(ref)
	if t == nil || t.isFinished() {
		return fmt.Errorf("acp: steering notice: turn %s is not running here", ref.TurnID)
	}
	return c.cs.NotifyExtension(ctx, steeringReady, steeringParams{SessionID: t.psid})
}

// steeringPulled answers the agent's steering pull from the running
// prompt of its provider session.
func (cl *client) steeringPull(ctx context.Context, params json.RawMessage) (any, error) {
	var p steeringParams
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, acpsdk.NewInvalidParams(map[string]any{"error": err.Error()})
	}
	out := struct {
		Messages []steeringPulled `json:"messages"`
	}{Messages: []steeringPulled{}}
	t := cl.c.turnByPSID(p.SessionID)
	if t == nil || t.isFinished() {
		return out, nil // no prompt of ours in flight: nothing to take
	}
	msgs, err := t.sink.PullSteering(ctx)
	if err != nil {
		// Nothing was pulled (the Host delivers only what is durably
		// pulled); the agent can pull again later.
		cl.c.rt.log.Warn("steering pull failed", "turn", t.ref.TurnID, "err", err)
		return nil, acpsdk.NewInternalError(map[string]any{"error": "steering pull failed; nothing was delivered"})
	}
	for _, m := range msgs {
		out.Messages = append(out.Messages, steeringPulled{EntryID: m.EntryID, Author: m.Author, Prompt: promptBlocks(m.Content)})
	}
	return out, nil
}
