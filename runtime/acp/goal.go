package acp

import (
	"context"
	"encoding/json"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/ensemble-dev/ensemble/host"
)

// GoalMethod is Ensemble's ACP extension notification for goals: an agent
// that owns goals natively reports its verdict on the goal the running
// prompt works for ("achieved", "failed", "continue") or sets/changes the
// goal itself ("set" with an objective). ACP has no goal protocol, so
// agents without it are driven by the Host's goal loop and its text
// convention alone.
const GoalMethod = "_ensemble/goal"

// GoalNotification is the params of GoalMethod.
type GoalNotification struct {
	SessionID string `json:"sessionId"`
	host.GoalReport
}

// goalNotification takes the agent's goal report. It is queued behind the
// prompt's earlier updates, so it reaches the Host in the order the agent
// sent it; one for a session with no prompt in flight is not Turn output
// and is dropped.
func (cl *client) goalNotification(params json.RawMessage) (any, error) {
	var n GoalNotification
	if err := json.Unmarshal(params, &n); err != nil {
		return nil, acpsdk.NewInvalidParams(map[string]any{"error": err.Error()})
	}
	if t := cl.c.turnByPSID(n.SessionID); t != nil {
		r := n.GoalReport
		t.push(item{goal: &r})
	}
	return nil, nil
}

// goal hands a goal report to the Host.
func (p *pumpState) goal(r host.GoalReport) {
	gr := p.t.sink
	if err := p.c.report(func(ctx context.Context) error { return gr.ReportGoal(ctx, r) }); err != nil {
		p.c.rt.log.Warn("goal report not recorded", "turn", p.t.ref.TurnID, "err", err)
	}
}
