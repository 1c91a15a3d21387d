package hub

import (
	"context"
	"errors"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

// GoalReader (Config.Goals) is how a session topic loads its goal
// (*host.Host implements it).
type GoalReader interface {
	GetGoal(ctx context.Context, ws, sessionID string) (host.GoalState, error)
}

// readGoal loads the session's goal into the view at baseline load. A
// goal_state fact that arrived meanwhile may already hold a newer state:
// the higher Seq wins either way.
func (t *topic) readGoal(ctx context.Context) error {
	gr := t.h.cfg.Goals
	if gr == nil {
		return nil
	}
	g, err := gr.GetGoal(ctx, t.ws, t.sid)
	if errors.Is(err, host.ErrNotFound) || host.CodeOf(err) == host.CodeNotFound {
		return nil
	}
	if he := (*host.Error)(nil); errors.As(err, &he) && he.Reason == host.ReasonGoalRecordCorrupt {
		// Quarantined by the Host and answered as a typed error by
		// goal.get: the session itself stays watchable, without a goal.
		return nil
	}
	if err != nil {
		return err
	}
	if g.Seq == 0 {
		return nil // never had a goal
	}
	t.mu.Lock()
	if newerGoal(g, t.sv.goal) {
		t.sv.goal = &g
	}
	t.mu.Unlock()
	return nil
}

// onGoalFact applies a committed goal state to the session topic and
// pushes it: every state carries its Seq, so a duplicate or an older one
// (the relay republishing, another replica's late copy) is dropped, and
// each replica pushes every change it receives in commit order.
func (h *Hub) onGoalFact(f host.Fact) {
	if f.Goal == nil || f.SessionID == "" {
		return
	}
	h.mu.Lock()
	var t *topic
	if e := h.workspaces[f.WorkspaceID]; e != nil {
		t = e.sessions[f.SessionID]
		// Session summaries carry the goal summary (the list's badge):
		// the workspace topic, and the session topic's own summary,
		// reread the session.
		if e.ws != nil {
			h.markDirty(e.ws, dirtySession(f.SessionID))
		}
		if t != nil {
			h.markDirty(t, dirtySession(f.SessionID))
		}
	}
	h.mu.Unlock()
	if t == nil {
		return
	}
	g := *f.Goal
	if g.WorkspaceID != t.ws || g.SessionID != t.sid {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !newerGoal(g, t.sv.goal) {
		return
	}
	t.sv.goal = &g
	if t.loaded {
		t.emit(protocol.KindGoalState, "", protocol.FromGoalState(g))
	}
}

// newerGoal reports whether g supersedes cur. States are ordered by Seq
// and, at one Seq, a held state follows the unheld one: a delete or an
// import holds the goal without changing its bytes (so not its Seq), and
// only a new revision (a higher Seq) ever releases it.
func newerGoal(g host.GoalState, cur *host.GoalState) bool {
	if cur == nil || g.Seq > cur.Seq {
		return true
	}
	return g.Seq == cur.Seq && g.Held && !cur.Held
}
